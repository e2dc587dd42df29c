"""``grid-tasks simulate``: replay workload traces through the Maui core."""

from __future__ import annotations

import json
import re
from contextlib import nullcontext
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import Progress

from grid_tasks.cli.simulate_grid import grid_command
from grid_tasks.cli.simulate_input import cluster_specs, progress_bar
from grid_tasks.errors import GridTasksError
from grid_tasks.sim.conventions import CONVENTIONS
from grid_tasks.sim.core import POLICIES
from grid_tasks.sim.metrics import write_jobs
from grid_tasks.sim.replay import ClusterSpec, Replay, ReplayError, ReplayResult
from grid_tasks.sim.report import Column, columns_for, groups_table, summary_table

_DURATION = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
DEFAULT_GANTT_OFFSET = 3 * 86400.0
DEFAULT_GANTT_LENGTH = 12 * 3600.0


def parse_window(text: str) -> tuple[float, float]:
    """``START:END`` in seconds of trace time; each may end in s, m, h or d."""
    parts = text.split(":")
    if len(parts) != 2:
        raise ReplayError(f"--gantt {text!r}: expected START:END, e.g. 3d:3.5d")
    bounds = []
    for part in parts:
        match = _DURATION.match(part)
        if not match:
            raise ReplayError(f"--gantt {text!r}: {part!r} is not a time (e.g. 7200, 120m, 2h, 1.5d)")
        bounds.append(float(match.group(1)) * _UNITS[match.group(2)])
    if not bounds[1] > bounds[0]:
        raise ReplayError(f"--gantt {text!r}: END must be after START")
    return bounds[0], bounds[1]


@dataclass
class Run:
    """One policy's replay and its wall time."""

    label: str
    result: ReplayResult
    sim_wall_s: float
    window: tuple[float, float] | None

    def headline(self) -> dict[str, Any]:
        out = self.result.to_dict()
        out["sim_wall_s"] = self.sim_wall_s
        return out


def _policies(policy: str, config: str | None, compare: str | None) -> list[tuple[str | None, str | None]]:
    """(preset, config file) pairs to run; a --compare item may also be a maui.cfg path."""
    if not compare:
        return [(policy, config)]
    if config is not None:
        raise ReplayError("--config and --compare together: list the maui.cfg in --compare instead")
    out: list[tuple[str | None, str | None]] = []
    for item in (x.strip() for x in compare.split(",")):
        if not item:
            continue
        if item.lower() in POLICIES:
            out.append((item.lower(), None))
        elif item.endswith(".cfg") or "/" in item:
            out.append((None, item))
        else:
            raise ReplayError(f"--compare: unknown policy {item!r} (use {', '.join(POLICIES)} "
                              "or a maui.cfg path)")
    if not out:
        raise ReplayError("--compare: no policy given")
    return out


def _replay(specs: list[ClusterSpec], preset: str | None, config: str | None, opts: dict[str, Any],
            bar: Progress | None) -> Run:
    begin = time.perf_counter()
    window = opts["window"]
    replay = Replay(specs, policy=preset, config=config, conventions=opts["conventions"],
                    first=opts["first"], skip_bad=opts["skip_bad"], window=window,
                    align=opts["align"])
    if window is None and opts["plots"]:
        first = replay.engine.next_time() or 0.0
        window = (first + DEFAULT_GANTT_OFFSET, first + DEFAULT_GANTT_OFFSET + DEFAULT_GANTT_LENGTH)
        replay.watch(window)
    tick = None
    if bar is not None:
        task = bar.add_task(replay.policy, total=replay.expected_jobs())
        tick = lambda r: bar.update(task, completed=r.submitted())  # noqa: E731
    result = replay.run(progress=tick)
    if result.summary is None:
        facts = "; ".join(f"{c.name}: {c.reader.job_lines} job lines, {c.convention.dropped} dropped, "
                          f"{c.reader.bad_lines} bad" for c in result.clusters)
        raise ReplayError(f"no measured job finished, nothing to report ({facts})")
    return Run(replay.policy, result, time.perf_counter() - begin, window)


def _jobs_path(base: str, label: str, several: bool) -> Path:
    path = Path(base)
    if not several:
        return path
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", label)
    return path.with_name(f"{path.stem}-{safe}{path.suffix}")


def _write_outputs(runs: list[Run], opts: dict[str, Any]) -> list[str]:
    written: list[str] = []
    if opts["jobs_out"]:
        for run in runs:
            path = _jobs_path(opts["jobs_out"], run.label, len(runs) > 1)
            write_jobs(run.result.jobs, path)
            written.append(str(path))
    if opts["plots"]:
        written.extend(str(p) for p in _write_plots(runs, Path(opts["plots"])))
    return written


def _write_plots(runs: list[Run], folder: Path) -> list[Path]:
    """Utilization and wait CDF over every run, one Gantt chart per run."""
    from grid_tasks.sim import plots  # matplotlib is slow to import: only when asked

    util = [(f"{r.label} {c.name}" if len(r.result.clusters) > 1 else r.label,
             [j for j in r.result.jobs if j.cluster == c.name], c.procs)
            for r in runs for c in r.result.clusters]
    out = [plots.plot_utilization(util, folder / "utilization.png"),
           plots.plot_wait_cdf([(r.label, r.result.jobs) for r in runs], folder / "wait_cdf.png")]
    for run in runs:
        window, reservations = run.window, run.result.reservations
        jobs = run.result.jobs
        if window is None or not any(j.submit < window[1] and j.end > window[0] for j in jobs):
            # nothing in the requested window: show the middle of the replay instead
            mid = (min(j.submit for j in jobs) + max(j.end for j in jobs)) / 2 if jobs else 0.0
            window, reservations = (mid, mid + DEFAULT_GANTT_LENGTH), []
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", run.label)
        out.append(plots.plot_gantt(jobs, window, folder / f"gantt-{name}.png",
                                    reservations=reservations, title=run.label))
    return out


def _print_rich(runs: list[Run], written: list[str], show_groups: bool) -> None:
    console = Console()
    if len(runs) == 1:
        columns = columns_for(runs[0].result, runs[0].sim_wall_s)
    else:
        columns = [Column(r.label, r.result.summary, r.sim_wall_s, r.result.events)
                   for r in runs if r.result.summary is not None]
    first = runs[0].result
    title = "Replay of " + ", ".join(f"{c.name} (P={c.procs})" for c in first.clusters)
    console.print(summary_table(columns, title=f"{title}, {first.conventions} conventions"))
    for cluster in first.clusters:
        info = cluster.info()
        console.print(f"{cluster.name}: {info['job_lines']:,} job lines, {info['bad_lines']:,} bad "
                      f"skipped, {info['dropped']:,} dropped, {info['unmeasured']:,} simulated "
                      "but unmeasured", highlight=False)
    if show_groups and len(runs) == 1 and first.summary is not None:
        console.print(groups_table(first.summary.by_size, "By job size (processors)", "size"))
        console.print(groups_table(first.summary.by_user, "Top users by processor-hours", "user",
                                   top=10))
    for run in runs:
        if run.result.unfinished:
            console.print(f"[yellow]warning: {run.label}: {run.result.unfinished} job(s) never "
                          "finished (the core could not place them)[/yellow]")
    for path in written:
        console.print(f"wrote {path}", highlight=False)


@click.command("simulate")
@click.argument("traces", nargs=-1, type=click.Path(dir_okay=False, path_type=str))
@click.option("--cluster", "clusters", multiple=True, metavar="TRACE[:P]",
              help="Add a cluster replaying TRACE on P processors (repeatable).")
@click.option("--policy", type=click.Choice(POLICIES, case_sensitive=False), default="easy",
              show_default=True, help="Core preset to replay with.")
@click.option("--config", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="A maui.cfg whose policy to replay with (instead of --policy).")
@click.option("--compare", metavar="P1,P2,...", default=None,
              help="Replay with each policy (preset or maui.cfg path) and show them side by side.")
@click.option("--procs", type=click.IntRange(min=1), default=None,
              help="Processors of the machine (default: the header's MaxProcs).")
@click.option("--first", type=click.IntRange(min=1), default=None,
              help="Replay only the first N job lines of each trace.")
@click.option("--conventions", type=click.Choice(sorted(CONVENTIONS)), default="default",
              show_default=True, help="Record-to-job conversion; pyss reproduces the reference.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@click.option("--plots", type=click.Path(file_okay=False, path_type=str), default=None,
              help="Write PNG plots (utilization, wait CDF, Gantt) into this directory.")
@click.option("--gantt", "gantt", metavar="START:END", default=None,
              help="Gantt window in trace seconds (units s/m/h/d allowed) [default: 12 h, 3 days in].")
@click.option("--jobs-out", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Write per-job results to FILE.csv or FILE.jsonl.")
@click.option("--skip-bad", is_flag=True, help="Skip (and count) malformed trace lines.")
@click.option("--align", type=click.Choice(["start", "unix"]), default="start", show_default=True,
              help="Multi-cluster clock: each trace from its time 0, or by UnixStartTime.")
@click.option("--groups/--no-groups", default=True, show_default=True,
              help="Also show the size-class and top-user tables.")
@click.option("--progress/--no-progress", default=None,
              help="Progress bar on stderr [default: when stderr is a terminal and not --json].")
@click.option("--grid", is_flag=True,
              help="Metascheduling: send a share of the jobs to a grid metascheduler and "
                   "compare policies (see above).")
@click.option("--grid-policy", type=click.Choice(["slice", "least-loaded", "reserve", "all"]),
              default=None, help="Metascheduling policy to run with --grid [default: all].")
@click.option("--grid-share", type=float, default=None,
              help="With --grid: fraction of each trace's jobs that are grid jobs [default: 0.1].")
@click.option("--coalloc-share", type=float, default=None,
              help="With --grid: fraction of grid jobs split over two clusters [default: 0.3].")
@click.option("--early-share", type=float, default=None,
              help="With --grid: fraction of the other grid jobs allowed to start before "
                   "their reservation [default: 0.5].")
@click.option("--slice", "slice_share", type=float, default=None,
              help="With --grid: share of each cluster the slice policy hands over [default: 0.25].")
@click.option("--seed", type=int, default=None,
              help="With --grid: seed of the grid-job selection [default: 1].")
def simulate(traces: tuple[str, ...], clusters: tuple[str, ...], policy: str, config: str | None,
             compare: str | None, procs: int | None, first: int | None, conventions: str,
             as_json: bool, plots: str | None, gantt: str | None, jobs_out: str | None,
             skip_bad: bool, align: str, groups: bool, progress: bool | None, grid: bool,
             **grid_opts: Any) -> None:
    """Replay SWF workload TRACE(s) through the Maui scheduling core and report.

    \b
    One TRACE: a replay on one cluster of P processors (the header's MaxProcs
    unless --procs).  Several TRACEs and/or --cluster TRACE:P: a multi-cluster
    replay, each trace on its own cluster and scheduler, on one clock.
    Traces may be plain or gzipped.  Metrics: wait, response, bounded slowdown
    (10 s threshold), utilization, makespan, per job-size class and user.

    \b
    Conventions (record -> job):
      default  drop records that never ran; requested processors and time
               (else allocated / run time); jobs are killed at their walltime
      pyss     the reference simulator's conversion, for one-to-one comparison
               with the workloads README table (broken records become unmeasured
               1-second jobs, estimate = max(req, run, 1), ...)

    \b
    --json prints one object: jobs_measured, mean_wait_s, mean_bsld, utilization,
    makespan_s, sim_wall_s, percentiles, and per-cluster input counts; with
    --compare, {"compare": [...], "policies": {name: object}}.

    \b
    --grid (seed 002's argument, measured): each trace is a cluster; a seeded
    share of its jobs goes to a metascheduler, some split in two halves that
    must start together on two clusters.  Policies: slice (a fixed share of
    every cluster belongs to the metascheduler), least-loaded (queue of the
    least loaded cluster; coallocated halves start when both can start now),
    reserve (estimate on every cluster, plan a common start, reserve it).
    Reports utilization and local/grid wait and bsld per policy; --plots
    writes grid_utilization.png and grid_wait_cdf.png.

    \b
    Examples:
      grid-tasks simulate SDSC-SP2.swf.gz --policy easy --conventions pyss --first 10000
      grid-tasks simulate CTC.swf.gz --compare easy,conservative,fcfs --json
      grid-tasks simulate --cluster KTH.swf.gz:100 --cluster SDSC-SP2.swf.gz:128 --plots out/
      grid-tasks simulate --grid KTH.swf.gz SDSC-SP2.swf.gz --first 5000 --plots out/
    """
    if grid or any(v is not None for v in grid_opts.values()):
        grid_command(grid, traces, clusters, procs, grid_opts, as_json=as_json, progress=progress,
                     policy=policy, config=config, first=first, conventions=conventions,
                     skip_bad=skip_bad, plots=plots,
                     unsupported={"--compare": compare, "--gantt": gantt, "--jobs-out": jobs_out,
                                  "--align unix": align if align == "unix" else None})
        return
    opts = {"conventions": conventions, "first": first, "skip_bad": skip_bad, "align": align,
            "plots": plots, "jobs_out": jobs_out,
            "window": parse_window(gantt) if gantt else None}
    show_bar = (not as_json and sys.stderr.isatty()) if progress is None else progress
    try:
        specs = cluster_specs(traces, clusters, procs)
        bar = progress_bar(show_bar)
        runs: list[Run] = []
        with bar if bar is not None else nullcontext():
            for preset, cfg in _policies(policy.lower(), config, compare):
                runs.append(_replay(specs, preset, cfg, opts, bar))
        written = _write_outputs(runs, opts)
    except GridTasksError as exc:
        if not as_json:
            raise  # the CLI group prints it (with a caret for source errors) and exits 1
        click.echo(json.dumps({"error": exc.to_dict()}, indent=2))
        sys.exit(1)
    if as_json:
        click.echo(json.dumps(_json_object(runs, compare is not None, written), indent=2))
    else:
        _print_rich(runs, written, groups)


def _json_object(runs: list[Run], compared: bool, written: list[str]) -> dict[str, Any]:
    if not compared:
        out = runs[0].headline()
    else:
        out = {"compare": [r.label for r in runs],
               "policies": {r.label: r.headline() for r in runs}}
    out["written"] = written
    return out
