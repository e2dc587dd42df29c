"""What both ``grid-tasks simulate`` commands (one cluster, a grid) read alike: the
clusters to replay, and the progress bar they show while replaying."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import Console
from rich.progress import (
    BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn,
)

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


def progress_bar(enabled: bool, submitted: bool = False) -> Progress | None:
    """The replay's progress bar on standard error (None when not wanted); with
    ``submitted``, a column of the jobs submitted so far beside the finished ones (tasks
    then carry a ``submitted`` field)."""
    if not enabled:
        return None
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("jobs finished")]
    if submitted:
        columns.append(TextColumn("({task.fields[submitted]:,} submitted)"))
    return Progress(*columns, TimeElapsedColumn(), console=Console(stderr=True),
                    transient=True)


#: Seconds between two redraws of a task: the bar moves several times a second.
REDRAW_EVERY = 0.2


class BarTicker:
    """Feeds one task of the bar from a replay's ``progress(submitted, finished)`` calls.

    The engine calls every few dozen events and never reads the clock; here, in the
    shell, the wall clock decides when the bar is worth updating, so a fast replay pays
    for a clock read per call and a slow one still moves at least once a second.
    """

    def __init__(self, bar: Progress, task: TaskID, interval: float = REDRAW_EVERY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.bar = bar
        self.task = task
        self.interval = interval
        self.clock = clock
        self.last = float("-inf")
        self.updates = 0

    def __call__(self, submitted: int, finished: int) -> None:
        now = self.clock()
        if now - self.last < self.interval:
            return
        self.last = now
        self.updates += 1
        self.bar.update(self.task, completed=finished, submitted=submitted)
