"""Rich views of the grid-level planning commands (``showstart`` without ``-r``,
``setres/showres/releaseres --grid``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text


def _alloc(alloc: Mapping[str, int]) -> str:
    return ",".join(f"{n}:{p}" for n, p in alloc.items())


def grid_start_view(report: Mapping[str, Any]) -> Any:
    """showstart across RMs: per-RM estimates, or the candidate common starts."""
    if report["kind"] == "single":
        comp = report["components"][0]
        table = Table(title=f"earliest starts of {comp['procs']} procs for "
                            f"{comp['duration']:g} s on every RM (best: {report['best'] or '-'})")
        for name in ("rm", "start", "in (s)", "allocation", "answer"):
            table.add_column(name)
        for row in report["rms"]:
            first = True
            for est in row["estimates"] or [None]:
                table.add_row(row["rm"] if first else "", est["start"] if est else "-",
                              f"{est['start_in']:g}" if est else "-",
                              _alloc(est["allocation"]) if est else "", row["answer"])
                first = False
        return table
    table = Table(title="common starts of the multi-request (best first)")
    for name in ("#", "start", "in (s)", "label", "rm", "allocation"):
        table.add_column(name)
    for i, sched in enumerate(report["schedules"]):
        for j, p in enumerate(sched["placements"]):
            table.add_row(str(i) if j == 0 else "", sched["start"] if j == 0 else "",
                          f"{sched['start_in']:g}" if j == 0 else "", p["label"], p["rm"],
                          _alloc(p["allocation"]))
    notes = [Text(w, style="yellow") for w in report.get("warnings", ())]
    return Group(table, *notes)


def grid_reservations_view(rows: Sequence[Any], now: datetime) -> Any:
    """showres --grid: one line per part, grouped by co-reservation."""
    table = Table(title=f"grid co-reservations ({len(rows)})")
    for name in ("name", "state", "start", "end", "rm", "reservation", "procs", "nodes",
                 "job"):
        table.add_column(name)
    for res in rows:
        for i, part in enumerate(res.parts):
            table.add_row(res.name if i == 0 else "", res.state(now) if i == 0 else "",
                          part.start.isoformat(timespec="seconds"),
                          part.end.isoformat(timespec="seconds"), part.rm, part.name,
                          str(sum(part.procs_by_node.values())), _alloc(part.procs_by_node),
                          "-" if part.job_id is None else str(part.job_id))
    return table


def coreservation_text(co: Any) -> str:
    """One line per part of a new co-reservation (setres --grid)."""
    lines = [f"grid reservation '{co.job_key}' from {co.to_dict()['start_iso']} to "
             f"{co.to_dict()['end_iso']} on {', '.join(co.rms)}:"]
    lines += [f"  {p.rm}: {p.name} {p.procs} procs on {_alloc(p.allocation)}"
              for p in co.parts]
    return "\n".join(lines)
