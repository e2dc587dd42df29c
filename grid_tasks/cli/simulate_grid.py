"""``grid-tasks simulate --grid``: metascheduling policies compared on shared traces.

The option parsing lives in :mod:`grid_tasks.cli.simulate`; this module runs the
policies (:mod:`grid_tasks.sim.grid`) and prints a rich table or JSON.
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click
from rich.progress import Progress
from rich.table import Table

from grid_tasks.cli.console import wide_console
from grid_tasks.cli.simulate_input import cluster_specs, progress_bar
from grid_tasks.errors import GridTasksError
from grid_tasks.sim.core import load_config
from grid_tasks.sim.grid import GRID_POLICIES, GridError, GridOptions, GridWorkload, PolicyRun, \
    load_workload
from grid_tasks.sim.grid_policies import run_policy
from grid_tasks.sim.replay import ClusterSpec
from grid_tasks.sim.report import fmt_seconds

__all__ = ["GridRun", "run_grid", "grid_json", "print_grid", "policies_for"]


def policies_for(choice: str) -> list[str]:
    """``all`` or one of :data:`GRID_POLICIES`."""
    if choice == "all":
        return list(GRID_POLICIES)
    if choice not in GRID_POLICIES:
        raise GridError(f"unknown grid policy {choice!r} (choose {', '.join(GRID_POLICIES)} or all)")
    return [choice]


class GridRun:
    """Every policy's run over one workload, with the wall time each took."""

    def __init__(self, workload: GridWorkload, runs: list[tuple[PolicyRun, float]]) -> None:
        self.workload = workload
        self.runs = runs

    @property
    def policy_runs(self) -> list[PolicyRun]:
        return [run for run, _ in self.runs]


def run_grid(specs: list[ClusterSpec], options: GridOptions, policies: list[str], *,
             core_policy: str | None, config: str | None, first: int | None, conventions: str,
             skip_bad: bool, bar: Progress | None) -> GridRun:
    """Load the traces once, then replay them under each metascheduling policy."""
    workload = load_workload(specs, options, first=first, conventions=conventions,
                             skip_bad=skip_bad)
    if not workload.grid:
        raise GridError("no job was selected for the grid: raise --grid-share or --first")
    core = load_config(core_policy, config)
    runs = []
    with bar if bar is not None else nullcontext():
        for name in policies:
            tick = None
            if bar is not None:
                task = bar.add_task(name, total=len(workload.grid))
                tick = lambda done, _total, task=task: bar.update(task, completed=done)  # noqa: E731
            begin = time.perf_counter()
            run = run_policy(workload, name, core, tick)
            runs.append((run, time.perf_counter() - begin))
    return GridRun(workload, runs)


def grid_json(result: GridRun, written: list[str]) -> dict[str, Any]:
    """The ``--json`` object: options, clusters, the workload split and each policy."""
    wl = result.workload
    return {
        "grid": asdict(wl.options),
        "clusters": dict(wl.procs),
        "workload": {"local_jobs": {n: len(v) for n, v in wl.local.items()},
                     "grid_jobs": len(wl.grid),
                     "coallocated": sum(1 for g in wl.grid if g.coallocated),
                     "early_start_allowed": sum(1 for g in wl.grid if g.early_start)},
        "policies": {run.policy: {**run.metrics(), "sim_wall_s": wall} for run, wall in result.runs},
        "written": written,
    }


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _secs(value: float | None) -> str:
    return "-" if value is None else fmt_seconds(value)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


_ROWS: tuple[tuple[str, Any], ...] = (
    ("utilization (all jobs)", lambda m: _pct(m["utilization"])),
    ("  local jobs' part", lambda m: _pct(m["utilization_local"])),
    ("  grid jobs' part", lambda m: _pct(m["utilization_grid"])),
    ("  of the slice (slice only)", lambda m: _pct(m.get("slice_utilization"))),
    ("local jobs run", lambda m: f"{m['local']['jobs']:,}"),
    ("local jobs refused (too wide)", lambda m: f"{m['local']['refused']:,}"),
    ("local mean wait (s)", lambda m: _secs(m["local"]["mean_wait_s"])),
    ("local p95 wait (s)", lambda m: _secs(m["local"]["p95_wait_s"])),
    ("local mean bsld", lambda m: _num(m["local"]["mean_bsld"])),
    ("grid jobs run", lambda m: f"{m['grid']['jobs']:,}"),
    ("grid jobs refused", lambda m: f"{m['grid']['refused']:,}"),
    ("  coallocated (2 clusters)", lambda m: f"{m['grid']['coallocated']:,}"),
    ("  started before reservation", lambda m: f"{m['grid']['started_early']:,}"),
    ("grid mean wait (s)", lambda m: _secs(m["grid"]["mean_wait_s"])),
    ("grid p95 wait (s)", lambda m: _secs(m["grid"]["p95_wait_s"])),
    ("grid mean bsld", lambda m: _num(m["grid"]["mean_bsld"])),
    ("coallocation max start skew (s)", lambda m: f"{m['grid']['coalloc_max_skew_s']:g}"),
    ("makespan (s)", lambda m: _secs(m["makespan_s"])),
    ("unfinished", lambda m: f"{m['unfinished']:,}"),
)


def print_grid(result: GridRun, written: list[str]) -> None:
    """One column per policy; cluster utilizations below; files written."""
    console = wide_console()
    wl = result.workload
    title = ("Metascheduling over " + ", ".join(f"{n} (P={p})" for n, p in wl.procs.items())
             + f": {len(wl.grid):,} grid jobs ({sum(g.coallocated for g in wl.grid):,} coallocated)")
    table = Table(title=title)
    table.add_column("metric")
    metrics = [(run.policy, run.metrics(), wall) for run, wall in result.runs]
    for name, _, _ in metrics:
        table.add_column(name, justify="right")
    for label, cell in _ROWS:
        table.add_row(label, *(cell(m) for _, m, _ in metrics))
    for cluster in wl.procs:
        table.add_row(f"utilization {cluster}", *(_pct(m["clusters"].get(cluster)) for _, m, _ in metrics))
    table.add_row("simulation wall time (s)", *(f"{w:.2f}" for _, _, w in metrics))
    console.print(table)
    opts = wl.options
    console.print(f"grid share {opts.grid_share:g}, coallocated share {opts.coalloc_share:g}, "
                  f"early-start share {opts.early_share:g}, slice {opts.slice:g}, seed {opts.seed}",
                  highlight=False)
    for path in written:
        console.print(f"wrote {path}", highlight=False)


def write_plots(result: GridRun, folder: str) -> list[str]:
    from grid_tasks.sim.grid_plots import write_grid_plots  # matplotlib: only when asked

    return [str(p) for p in write_grid_plots(result.policy_runs, Path(folder))]


_FLAGS = {"grid_policy": "--grid-policy", "grid_share": "--grid-share",
          "coalloc_share": "--coalloc-share", "early_share": "--early-share",
          "slice_share": "--slice", "seed": "--seed"}


def _options(grid_opts: dict[str, Any]) -> tuple[GridOptions, list[str]]:
    defaults = GridOptions()
    pick = {name: grid_opts.get(key) for name, key in (
        ("grid_share", "grid_share"), ("coalloc_share", "coalloc_share"),
        ("early_share", "early_share"), ("slice", "slice_share"), ("seed", "seed"))}
    options = GridOptions(**{k: (getattr(defaults, k) if v is None else v) for k, v in pick.items()})
    return options, policies_for(grid_opts.get("grid_policy") or "all")


def grid_command(grid: bool, traces: tuple[str, ...], clusters: tuple[str, ...], procs: int | None,
                 grid_opts: dict[str, Any], *, as_json: bool, progress: bool | None,
                 policy: str, config: str | None, first: int | None, conventions: str,
                 skip_bad: bool, plots: str | None, unsupported: dict[str, Any]) -> None:
    """The body of ``simulate --grid`` (errors go out as JSON with ``--json``)."""
    show_bar = (not as_json and sys.stderr.isatty()) if progress is None else progress
    try:
        if not grid:
            given = [_FLAGS.get(k, k) for k, v in grid_opts.items() if v is not None]
            raise GridError(f"{', '.join(given)}: add --grid (grid options need it)")
        clash = [name for name, value in unsupported.items() if value]
        if clash:
            raise GridError(f"{', '.join(clash)} cannot be combined with --grid")
        options, policies = _options(grid_opts)
        result = run_grid(cluster_specs(traces, clusters, procs), options, policies,
                          core_policy=None if config else policy, config=config, first=first,
                          conventions=conventions, skip_bad=skip_bad,
                          bar=progress_bar(show_bar))
        written = write_plots(result, plots) if plots else []
    except GridTasksError as exc:
        if not as_json:
            raise
        click.echo(json.dumps({"error": exc.to_dict()}, indent=2))
        sys.exit(1)
    if as_json:
        click.echo(json.dumps(grid_json(result, written), indent=2))
    else:
        print_grid(result, written)
