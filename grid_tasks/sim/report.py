"""Rich tables for replay results: the summary side by side, size classes, users, and a
comparison of policies on the jobs they all finished."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.table import Table

from grid_tasks.sim.compare import Comparison
from grid_tasks.sim.metrics import GroupStats, Summary

__all__ = ["Column", "summary_table", "groups_table", "columns_for", "fmt_seconds",
           "compare_table"]


@dataclass
class Column:
    """One column of the summary table: a label, its metrics and run facts."""

    label: str
    summary: Summary
    sim_wall_s: float | None = None
    events: int | None = None
    unfinished: int | None = None


def fmt_seconds(value: float) -> str:
    """``5,720.2`` followed by a human scale (``1.6h``) when it helps."""
    text = f"{value:,.1f}"
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if abs(value) >= size:
            return f"{text} ({value / size:.1f}{unit})"
    return text


_ROWS: tuple[tuple[str, Any], ...] = (
    ("jobs measured", lambda c: f"{c.summary.jobs_measured:,}"),
    ("jobs unfinished", lambda c: "" if c.unfinished is None else f"{c.unfinished:,}"),
    ("jobs killed at walltime", lambda c: f"{c.summary.jobs_killed:,}"),
    ("mean wait (s)", lambda c: fmt_seconds(c.summary.wait_s.mean)),
    ("median wait (s)", lambda c: fmt_seconds(c.summary.wait_s.p50)),
    ("p95 wait (s)", lambda c: fmt_seconds(c.summary.wait_s.p95)),
    ("mean response (s)", lambda c: fmt_seconds(c.summary.response_s.mean)),
    ("mean bounded slowdown", lambda c: f"{c.summary.bsld.mean:,.3f}"),
    ("p95 bounded slowdown", lambda c: f"{c.summary.bsld.p95:,.2f}"),
    ("utilization", lambda c: f"{c.summary.utilization:.4f}"),
    ("makespan (s)", lambda c: fmt_seconds(c.summary.makespan_s)),
    ("events", lambda c: "" if c.events is None else f"{c.events:,}"),
    ("simulation wall time (s)", lambda c: "" if c.sim_wall_s is None else f"{c.sim_wall_s:.2f}"),
)


def summary_table(columns: Sequence[Column], title: str = "Replay summary") -> Table:
    """Metrics as rows, one column per policy (or cluster)."""
    table = Table(title=title, title_justify="left")
    table.add_column("metric", style="bold")
    for column in columns:
        table.add_column(column.label, justify="right")
    for name, cell in _ROWS:
        table.add_row(name, *(cell(c) for c in columns))
    return table


def groups_table(groups: dict[str, GroupStats], title: str, key_label: str,
                 top: int | None = None) -> Table:
    """One row per group (size class or user), ``top`` rows at most."""
    table = Table(title=title, title_justify="left")
    for name in (key_label, "jobs", "mean wait (s)", "p90 wait (s)", "mean response (s)",
                 "mean bsld", "proc-hours"):
        table.add_column(name, justify="left" if name == key_label else "right")
    items = list(groups.items())[:top] if top else list(groups.items())
    for key, g in items:
        table.add_row(key, f"{g.jobs:,}", f"{g.mean_wait_s:,.1f}", f"{g.p90_wait_s:,.1f}",
                      f"{g.mean_response_s:,.1f}", f"{g.mean_bsld:,.2f}",
                      f"{g.proc_seconds / 3600:,.1f}")
    return table


def columns_for(result: Any, sim_wall_s: float | None = None) -> list[Column]:
    """The columns of one :class:`ReplayResult`: one per cluster, plus ``all`` if several."""
    if len(result.clusters) == 1:
        cluster = result.clusters[0]
        if cluster.summary is None:
            return []
        return [Column(result.policy, cluster.summary, sim_wall_s, result.events,
                       result.unfinished)]
    cols = [Column(f"{c.name}", c.summary) for c in result.clusters if c.summary is not None]
    if result.summary is not None:
        cols.append(Column("all clusters", result.summary, sim_wall_s, result.events,
                           result.unfinished))
    return cols


_SET_ROWS: tuple[tuple[str, Any], ...] = (
    ("jobs measured", lambda s: f"{s.jobs_measured:,}"),
    ("mean wait (s)", lambda s: fmt_seconds(s.wait_s.mean)),
    ("median wait (s)", lambda s: fmt_seconds(s.wait_s.p50)),
    ("p95 wait (s)", lambda s: fmt_seconds(s.wait_s.p95)),
    ("mean response (s)", lambda s: fmt_seconds(s.response_s.mean)),
    ("mean bounded slowdown", lambda s: f"{s.bsld.mean:,.3f}"),
    ("p95 bounded slowdown", lambda s: f"{s.bsld.p95:,.2f}"),
    ("utilization", lambda s: f"{s.utilization:.4f}"),
    ("makespan (s)", lambda s: fmt_seconds(s.makespan_s)),
)
_OWN_ROWS = ("jobs measured", "mean wait (s)", "mean bounded slowdown", "utilization")


def compare_table(cmp: Comparison, title: str, *, walls: dict[str, float] | None = None,
                  events: dict[str, int] | None = None) -> Table:
    """Policies as columns.  First the jobs each left unfinished, then the metrics on
    the common set; when the policies finished different jobs, a second section gives
    a few figures on each policy's own finished jobs, labelled as not comparable."""
    table = Table(title=title, title_justify="left")
    table.add_column("metric", style="bold")
    for label in cmp.labels:
        table.add_column(label, justify="right")
    table.add_row("jobs unfinished", *(f"{cmp.unfinished[x]:,}" for x in cmp.labels))
    if not cmp.same_jobs:
        table.add_section()
        table.add_row(f"on the {cmp.common_size:,} jobs every policy finished:", style="italic")
    _set_rows(table, cmp.labels, cmp.common, _SET_ROWS, indent=not cmp.same_jobs)
    if not cmp.same_jobs:
        table.add_section()
        table.add_row("on each policy's own finished jobs (not comparable):", style="italic")
        _set_rows(table, cmp.labels, cmp.own, [r for r in _SET_ROWS if r[0] in _OWN_ROWS],
                  indent=True)
    table.add_section()
    if events is not None:
        table.add_row("events", *(f"{events[x]:,}" for x in cmp.labels))
    if walls is not None:
        table.add_row("simulation wall time (s)", *(f"{walls[x]:.2f}" for x in cmp.labels))
    return table


def _set_rows(table: Table, labels: Sequence[str], summaries: dict[str, Summary | None],
              rows: Sequence[tuple[str, Any]], indent: bool) -> None:
    for name, cell in rows:
        table.add_row(f"  {name}" if indent else name, *(cell(summaries[x]) if summaries[x] is not None else "-"
                                     for x in labels))
