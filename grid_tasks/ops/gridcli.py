"""What the grid-level CLI commands do, between the click options and :mod:`.gridres`.

Each function opens the command's connections (SQL, the Celery app, the token store,
the live collection) through an :class:`~grid_tasks.ops.shell.OpsShell`, runs one
broker operation and returns ``(json data, rich renderable)`` for ``emit``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from rich.table import Table

from grid_tasks.broker.gridres import (
    grid_start, parse_grid_spec, release_grid_reservations, set_grid_reservation,
    show_grid_reservations,
)
from grid_tasks.broker.gridview import (
    coreservation_text, grid_reservations_view, grid_start_view,
)
from grid_tasks.broker.live import Broker, new_job_key
from grid_tasks.legion.collection import Requester
from grid_tasks.ops.plan import parse_request
from grid_tasks.ops.planning import request_kind
from grid_tasks.ops.timefmt import format_duration, format_time
from grid_tasks.rsl import lower
from grid_tasks.rsl.lower import SubjobRequest

__all__ = ["showstart_grid", "setres_grid", "showres_grid", "releaseres_grid"]


@contextmanager
def _broker(shell: Any) -> Iterator[Broker]:
    broker = Broker.for_settings(shell.settings, shell.grid().app)
    try:
        yield broker
    finally:
        broker.close()


def _request_subjobs(text: str) -> list[SubjobRequest]:
    """showstart's REQUEST (PROCS@DURATION or RSL) as subjob requests, none placed."""
    if request_kind(text) == "procs":
        core = parse_request(text)
        return [SubjobRequest(index=0, executable="", count=int(core.procs),
                              max_wall_time_s=int(round(core.walltime)))]
    return lower(text, source="<showstart>")


def showstart_grid(shell: Any, request: str, limit: int) -> tuple[dict[str, Any], Any]:
    """showstart REQUEST across every RM (the common start for a multi-request).  The
    present is read once the broker is connected (that loads the Grid API), so the
    answer's "start in" does not count the command's own start-up."""
    with _broker(shell) as broker:
        now = shell.now().timestamp()
        report = grid_start(broker, _request_subjobs(request), now=now,
                            requester=Requester.current(), limit=limit)
    report["request"] = request
    if report["kind"] == "single":
        return report, _single_start_view(report)
    return report, grid_start_view(report)


def _single_start_view(report: dict[str, Any]) -> Table:
    """showstart of one request on every RM, in the layout and time format of
    ``showstart -r RM`` (start in HH:MM:SS, start time), one row per RM: an RM the
    request can never use says so."""
    comp = report["components"][0]
    table = Table(title=f"request {report['request']!r} requires {comp['procs']} procs for "
                        f"{format_duration(comp['duration'])} on every RM "
                        f"(best: {report['best'] or '-'})", title_justify="left")
    for col in ("RM", "", "start in", "start time", "nodes", "answer"):
        table.add_column(col)
    for row in report["rms"]:
        if not row["estimates"]:
            table.add_row(row["rm"], "-", "-", "-", "-", row["answer"])
        for i, est in enumerate(row["estimates"]):
            table.add_row(row["rm"] if i == 0 else "", "Earliest start" if i == 0 else
                          "Alternative", format_duration(est["start_in"]),
                          format_time(datetime.fromisoformat(est["start"])),
                          ", ".join(f"{n}:{k}" for n, k in est["allocation"].items()),
                          row["answer"] if i == 0 else "")
    return table


def setres_grid(shell: Any, spec: str, *, name: str | None, start: datetime,
                duration: float | None) -> tuple[dict[str, Any], Any]:
    """setres --grid: a named co-reservation across RMs through the broker."""
    subs = parse_grid_spec(spec, duration)
    with _broker(shell) as broker, shell.session() as session:
        now = shell.now().timestamp()  # connected: the present of the request
        co = set_grid_reservation(broker, session, name or new_job_key("grid"), subs,
                                  now=now, not_before=start.timestamp(),
                                  requester=Requester.current())
        broker.sweep(now)
    return co.to_dict(), coreservation_text(co)


def showres_grid(shell: Any) -> tuple[list[dict[str, Any]], Any]:
    """showres --grid: every co-reservation not ended yet, with its per-RM parts."""
    now = shell.now()
    with shell.session() as session:
        rows = show_grid_reservations(session, now)
    return [r.to_dict(now) for r in rows], grid_reservations_view(rows, now)


def releaseres_grid(shell: Any, names: Sequence[str]) -> tuple[list[dict[str, Any]], str]:
    """releaseres --grid NAME...: every part released on its RM, and the tokens."""
    with _broker(shell) as broker, shell.session() as session:
        out = release_grid_reservations(broker, session, names)
    lines = [f"grid reservation '{item['name']}' released on {released_on(item['parts'])}"
             for item in out]
    return out, "\n".join(lines)


def released_on(parts: Sequence[dict[str, Any]]) -> str:
    """``rmA, rmB``: each RM once, in the order of its first part (a reservation may hold
    several parts on one RM), with the first problem of its parts when one had one."""
    problems: dict[str, str | None] = {}
    for part in parts:
        problem = None if part["released"] else (part["error"] or "gone")
        if problems.get(part["rm"]) is None:
            problems[part["rm"]] = problem
    return ", ".join(rm + (f" ({problem})" if problem else "") for rm, problem in problems.items())
