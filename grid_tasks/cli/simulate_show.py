"""What ``grid-tasks simulate`` shows of its replays: the tables and the JSON object.

A comparison shows the line saying which jobs it measures (the common set) above its
table, and its JSON carries the same basis, so no reader sees two policies side by
side without knowing they were measured on different jobs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rich.console import Console

from grid_tasks.cli.console import wide_console
from grid_tasks.maui.pool_compiled import CORE
from grid_tasks.maui.pool_site import CORE as SITE_CORE
from grid_tasks.sim.compare import Comparison, basis_line
from grid_tasks.sim.feasibility import NeverStart
from grid_tasks.sim.replay import ReplayResult
from grid_tasks.sim.report import columns_for, compare_table, groups_table, summary_table

__all__ = ["Run", "print_rich", "json_object"]


@dataclass
class Run:
    """One policy's replay, its wall time and what its configuration can never start."""

    label: str
    result: ReplayResult
    sim_wall_s: float
    window: tuple[float, float] | None
    never: list[NeverStart] = field(default_factory=list)

    def headline(self) -> dict[str, Any]:
        out = self.result.to_dict()
        out["sim_wall_s"] = self.sim_wall_s
        out["never_start"] = [n.to_dict() for n in self.never]
        return out


def _print_compare(console: Console, runs: list[Run], cmp: Comparison, title: str) -> None:
    """The basis line above the table, then the table (common set first)."""
    console.print(basis_line(cmp), style="" if cmp.same_jobs else "bold yellow",
                  highlight=False)
    console.print(compare_table(cmp, title, walls={r.label: r.sim_wall_s for r in runs},
                                events={r.label: r.result.events for r in runs}))


def print_rich(runs: list[Run], written: list[str], show_groups: bool,
                cmp: Comparison | None) -> None:
    console = wide_console()
    first = runs[0].result
    title = "Replay of " + ", ".join(f"{c.name} (P={c.procs})" for c in first.clusters)
    title = f"{title}, {first.conventions} conventions"
    if cmp is not None:
        _print_compare(console, runs, cmp, title)
    else:
        if first.unfinished and first.summary is not None:
            console.print(f"{first.unfinished:,} job(s) never finished; the metrics below are on "
                          f"the {first.summary.jobs_measured:,} measured jobs that did.",
                          style="bold yellow", highlight=False)
        console.print(summary_table(columns_for(first, runs[0].sim_wall_s), title=title))
    for cluster in first.clusters:
        info = cluster.info()
        console.print(f"{cluster.name}: {info['job_lines']:,} job lines, {info['bad_lines']:,} bad "
                      f"skipped, {info['dropped']:,} dropped, {info['unmeasured']:,} simulated "
                      "but unmeasured", highlight=False)
    if show_groups and len(runs) == 1 and first.summary is not None:
        console.print(groups_table(first.summary.by_size, "By job size (processors)", "size"))
        console.print(groups_table(first.summary.by_user, "Top users by processor-hours", "user",
                                   top=10))
    for path in written:
        console.print(f"wrote {path}", highlight=False)


def json_object(runs: list[Run], cmp: Comparison | None, written: list[str]) -> dict[str, Any]:
    """One run: its headline.  A comparison: the basis (common set, unfinished counts),
    and per policy its own figures (``metrics_on``) with the common-set ones beside."""
    if cmp is None:
        out = runs[0].headline()
    else:
        policies = {}
        for run in runs:
            entry = run.headline()
            entry["metrics_on"] = "own finished jobs"
            common = cmp.common[run.label]
            entry["common_set"] = common.headline() if common is not None else None
            policies[run.label] = entry
        out = {"compare": [r.label for r in runs], "basis": "jobs every policy finished",
               "common_jobs": cmp.common_size, "same_jobs": cmp.same_jobs,
               "unfinished": dict(cmp.unfinished), "policies": policies}
    out["written"] = written
    out["conservative_core"] = CORE  # "compiled" or "pure": a missing build shows here
    out["site_core"] = SITE_CORE  # the same for a site's maui.cfg on one pool
    return out
