"""What both ``grid-tasks simulate`` commands (one cluster, a grid) read alike: the
clusters to replay, and the progress bar they show while replaying."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from grid_tasks.sim.replay import ClusterSpec, ReplayError, parse_cluster_arg


def cluster_specs(traces: tuple[str, ...], clusters: tuple[str, ...],
                  procs: int | None) -> list[ClusterSpec]:
    """One ClusterSpec per TRACE and per ``--cluster TRACE[:P]``; ``procs`` where a
    cluster names none."""
    specs = [ClusterSpec(t) for t in traces] + [parse_cluster_arg(c) for c in clusters]
    if not specs:
        raise ReplayError("give a TRACE (or --cluster TRACE[:P]); see grid-tasks simulate --help")
    for spec in specs:
        if spec.procs is None:
            spec.procs = procs
    return specs


def progress_bar(enabled: bool) -> Progress | None:
    """The replay's progress bar on standard error (None when not wanted)."""
    if not enabled:
        return None
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("jobs"), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=True)
