"""``grid-tasks simulate``: replay workload traces through the Maui core."""

from __future__ import annotations

import json
import re
from contextlib import nullcontext
import sys
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, TaskID

from grid_tasks.cli.simulate_grid import grid_command
from grid_tasks.cli.simulate_input import BarTicker, cluster_specs, progress_bar
from grid_tasks.cli.simulate_show import Run, json_object, print_rich
from grid_tasks.errors import GridTasksError
from grid_tasks.sim.conventions import CONVENTIONS
from grid_tasks.sim.compare import Comparison, compare
from grid_tasks.sim.core import POLICIES
from grid_tasks.sim.feasibility import NeverStart
from grid_tasks.sim.metrics import write_jobs
from grid_tasks.sim.replay import ClusterSpec, Replay, ReplayError

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


def _setup(specs: list[ClusterSpec], preset: str | None, config: str | None,
           opts: dict[str, Any]) -> Replay:
    """A replay ready to run (its Gantt window chosen when plots are asked for)."""
    replay = Replay(specs, policy=preset, config=config, conventions=opts["conventions"],
                    first=opts["first"], skip_bad=opts["skip_bad"], window=opts["window"],
                    align=opts["align"])
    if opts["window"] is None and opts["plots"]:
        first = replay.engine.next_time() or 0.0
        replay.watch((first + DEFAULT_GANTT_OFFSET,
                      first + DEFAULT_GANTT_OFFSET + DEFAULT_GANTT_LENGTH))
    return replay


def _warn_never_start(found: dict[str, list[NeverStart]]) -> None:
    """Before any replay: each limit that can never let some jobs start, once."""
    console = Console(stderr=True)
    said: set[str] = set()
    for findings in found.values():
        for finding in findings:
            message = finding.message()
            if message not in said:
                said.add(message)
                console.print(f"[yellow]warning: {escape(message)}[/yellow]", highlight=False)


def _run(replay: Replay, never: list[NeverStart], bar: Progress | None,
         task: TaskID | None) -> Run:
    begin = time.perf_counter()
    ticker = BarTicker(bar, task) if bar is not None and task is not None else None
    result = replay.run(progress=ticker)
    if bar is not None and task is not None:
        bar.update(task, completed=len(result.jobs), submitted=replay.submitted())
    if result.summary is None:
        facts = "; ".join(f"{c.name}: {c.reader.job_lines} job lines, {c.convention.dropped} dropped, "
                          f"{c.reader.bad_lines} bad" for c in result.clusters)
        raise ReplayError(f"no measured job finished, nothing to report ({facts})")
    return Run(replay.policy, result, time.perf_counter() - begin, replay.window, never)


def _run_all(specs: list[ClusterSpec], pairs: list[tuple[str | None, str | None]],
             opts: dict[str, Any], show_bar: bool) -> list[Run]:
    """Set every policy up, say what can never start, then replay them in turn, each
    with its own task on the bar (all shown from the start, each moving when it runs)."""
    replays: list[Replay] = []
    try:
        for preset, cfg in pairs:
            replays.append(_setup(specs, preset, cfg, opts))
        status = Console(stderr=True).status("checking the throttles against the traces")
        with status if show_bar else nullcontext():  # a whole trace is read once more
            never = {str(i): r.never_start() for i, r in enumerate(replays)}
        _warn_never_start(never)
        bar = progress_bar(show_bar, submitted=True)
        with bar if bar is not None else nullcontext():
            tasks = [bar.add_task(r.policy, total=r.expected_jobs(), submitted=0)
                     if bar is not None else None for r in replays]
            return [_run(r, never[str(i)], bar, tasks[i]) for i, r in enumerate(replays)]
    finally:
        for replay in replays:
            replay.close()


def _comparison(runs: list[Run]) -> Comparison:
    return compare([(r.label, r.result.jobs, r.result.unfinished, r.result.summary)
                    for r in runs], sum(c.procs for c in runs[0].result.clusters))


def _jobs_path(base: str, label: str, several: bool) -> Path:
    path = Path(base)
    if not several:
        return path
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", label)
    return path.with_name(f"{path.stem}-{safe}{path.suffix}")


def _write_outputs(runs: list[Run], opts: dict[str, Any],
                   cmp: Comparison | None) -> list[str]:
    written: list[str] = []
    if opts["jobs_out"]:
        for run in runs:
            path = _jobs_path(opts["jobs_out"], run.label, len(runs) > 1)
            write_jobs(run.result.jobs, path)
            written.append(str(path))
    if opts["plots"]:
        written.extend(str(p) for p in _write_plots(runs, Path(opts["plots"]), cmp))
    return written


def _plot_basis(runs: list[Run], cmp: Comparison | None) -> tuple[dict[str, list[Any]], str]:
    """The jobs each run's comparison plots draw, and the words saying which they are."""
    if cmp is None:
        run = runs[0]
        left = run.result.unfinished
        return ({run.label: run.result.jobs},
                f"{left:,} unfinished job(s) not shown" if left else "")
    if cmp.same_jobs:
        return cmp.common_jobs, f"all {cmp.common_size:,} measured jobs"
    return cmp.common_jobs, f"the {cmp.common_size:,} jobs every policy finished"


def _write_plots(runs: list[Run], folder: Path, cmp: Comparison | None) -> list[Path]:
    """Utilization and wait CDF over every run (on the common set when comparing), one
    Gantt chart per run."""
    from grid_tasks.sim import plots  # matplotlib is slow to import: only when asked

    jobs_of, basis = _plot_basis(runs, cmp)
    util = [(f"{r.label} {c.name}" if len(r.result.clusters) > 1 else r.label,
             [j for j in jobs_of[r.label] if j.cluster == c.name], c.procs)
            for r in runs for c in r.result.clusters]
    left = {r.label: r.result.unfinished for r in runs}
    legend = {x: f"{x} ({left[x]:,} unfinished)" if cmp is not None and left[x] else x
              for x in left}
    out = [plots.plot_utilization(util, folder / "utilization.png", basis=basis),
           plots.plot_wait_cdf([(legend[r.label], jobs_of[r.label]) for r in runs],
                               folder / "wait_cdf.png", basis=basis)]
    for run in runs:
        window, reservations = run.window, run.result.reservations
        jobs = run.result.jobs
        if window is None or not any(j.submit < window[1] and j.end > window[0] for j in jobs):
            # nothing in the requested window: show the middle of the replay instead
            mid = (min(j.submit for j in jobs) + max(j.end for j in jobs)) / 2 if jobs else 0.0
            window, reservations = (mid, mid + DEFAULT_GANTT_LENGTH), []
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", run.label)
        out.append(plots.plot_gantt(jobs, window, folder / f"gantt-{name}.png",
                                    reservations=reservations, title=run.label,
                                    procs=sum(c.procs for c in run.result.clusters)))
    return out


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
    --compare measures every policy on the same jobs: the headline metrics are
    computed on the measured jobs EVERY policy finished (the common set), each
    policy's jobs left unfinished are a row of their own, and when the sets
    differ a second section gives each policy's figures on its own finished
    jobs (not comparable).  The line above the table says which set is used;
    --plots draws the utilization and wait CDF on the common set too.

    \b
    A maui.cfg whose throttles can never start some jobs (MAXPROC, MAXPS,
    MAXNODE or MAXJOB of a credential or system-wide below one job's size) is
    reported before the replay, once per limit, with its line in the file;
    those jobs stay unfinished.

    \b
    --json prints one object: jobs_measured, mean_wait_s, mean_bsld, utilization,
    makespan_s, sim_wall_s, unfinished, never_start, percentiles, and per-cluster
    input counts; with --compare, {"compare": [...], "common_jobs": N,
    "unfinished": {name: n}, "policies": {name: object with "common_set"}}.

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
        runs = _run_all(specs, _policies(policy.lower(), config, compare), opts, show_bar)
        cmp = _comparison(runs) if compare is not None else None
        written = _write_outputs(runs, opts, cmp)
    except GridTasksError as exc:
        if not as_json:
            raise  # the CLI group prints it (with a caret for source errors) and exits 1
        click.echo(json.dumps({"error": exc.to_dict()}, indent=2))
        sys.exit(1)
    if as_json:
        click.echo(json.dumps(json_object(runs, cmp, written), indent=2))
    else:
        print_rich(runs, written, groups, cmp)
