"""``setres``, ``showres`` and ``releaseres``: administrative reservations of an RM.

A reservation is validated against the RM's Maui core loaded from SQL (running jobs,
existing reservations, nodes): the core places it or refuses it
(:class:`grid_tasks.maui.ReservationRefused`, never an overcommit), then it is stored
as a SQL ``reservations`` row of kind admin.  The row keeps what the live loader
reads back (``nodes`` it may use; ``resources`` ``tasks``/``procs_per_task``/
``mem_per_task``) plus ``procs_by_node``, where the core placed it, for checknode.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from grid_tasks.db import ACL_KEYS, Job, Reservation, ReservationKind, repository
from grid_tasks.errors import NotFoundError
from grid_tasks.maui import ACL, ReservationRefused
from grid_tasks.maui import Reservation as CoreReservation

from .common import ACTIVE_GRAM, check_rm, epoch
from .nodes import reservation_procs
from .plan import load_scheduler
from .timefmt import INFINITE, OpsError, iso, json_seconds

#: Stored end of a reservation without end (SQL has no infinity).
FOREVER = datetime(9999, 12, 31, tzinfo=timezone.utc)
_TASKS_RE = re.compile(r"^TASKS==(\d+)$", re.IGNORECASE)
_AT_RE = re.compile(r"^(\d+)@(.+)$")


class ReservationError(OpsError):
    """A setres/releaseres request that cannot be honoured (bad resources, no node...)."""


@dataclass(frozen=True)
class ResourceRequest:
    """What setres asks for: ``tasks`` of ``procs_per_task`` somewhere in ``nodes``
    (all of the RM when empty), or, with ``tasks`` 0, every processor of ``nodes``."""

    tasks: int
    procs_per_task: int
    mem_per_task: int
    nodes: tuple[str, ...]


def per_task(text: str | None) -> tuple[int, int]:
    """``-r PROCS=2,MEM=512`` -> (procs, memory MB) per task."""
    procs, mem = 1, 0
    for item in filter(None, (text or "").split(",")):
        key, _, value = item.partition("=")
        if not value.isdigit() or key.strip().upper() not in ("PROCS", "MEM"):
            raise ReservationError(f"-r: cannot read {item!r} (expected PROCS=N or MEM=MB, "
                                   f"comma separated)")
        if key.strip().upper() == "PROCS":
            procs = int(value)
        else:
            mem = int(value)
    if procs < 1:
        raise ReservationError(f"-r: PROCS must be at least 1, got {procs}")
    return procs, mem


def match_hosts(expr: str, names: Sequence[str]) -> tuple[str, ...]:
    """Node names of an RM matching ``expr``: ALL, a comma list of names, or a regex
    matching whole names; ReservationError when nothing matches."""
    expr = expr.strip()
    if expr.upper() == "ALL":
        return tuple(names)
    parts = [p.strip() for p in expr.split(",") if p.strip()]
    if parts and all(p in names for p in parts):
        return tuple(parts)
    try:
        pattern = re.compile(expr)
    except re.error as err:
        raise ReservationError(f"hostlist {expr!r}: not a node list nor a valid regex "
                               f"({err})") from None
    found = tuple(n for n in names if pattern.fullmatch(n))
    if not found:
        raise ReservationError(f"hostlist {expr!r} matches no node (nodes: "
                               f"{', '.join(names) or 'none'})")
    return found


def parse_resources(expr: str, per_task_text: str | None, names: Sequence[str]) -> ResourceRequest:
    """The positional setres expression: ``TASKS==N``, ``N@HOSTLIST`` (N tasks on those
    nodes) or a HOSTLIST (whole nodes, or ``-r`` sized tasks... see ``per_task``)."""
    procs, mem = per_task(per_task_text)
    tasks_only = _TASKS_RE.match(expr.strip())
    if tasks_only:
        tasks = int(tasks_only.group(1))
        if tasks < 1:
            raise ReservationError(f"{expr!r}: TASKS must be at least 1")
        return ResourceRequest(tasks, procs, mem, ())
    at = _AT_RE.match(expr.strip())
    if at:
        return ResourceRequest(int(at.group(1)), procs, mem, match_hosts(at.group(2), names))
    return ResourceRequest(0, 1, 0, match_hosts(expr, names))


def acl_from(lists: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """The stored ACL: only :data:`grid_tasks.db.ACL_KEYS`, empty lists dropped."""
    unknown = set(lists) - set(ACL_KEYS)
    if unknown:
        raise ReservationError(f"unknown ACL key(s) {', '.join(sorted(unknown))}")
    return {k: sorted({str(v) for v in vals}) for k, vals in lists.items() if vals}


#: The core's "[start, end)" in POSIX seconds (printed with 6 digits): an operator
#: reads the reservation's own times instead.
_INTERVAL_RE = re.compile(r"\[(-?[\d.e+]+), (-?[\d.e+]+|inf)\)")


def _default_name(session: Session, rm: str, acl: Mapping[str, list[str]]) -> str:
    base = (acl.get("users") or acl.get("groups") or acl.get("accounts") or ["system"])[0]
    taken = set(session.scalars(select(Reservation.name).where(Reservation.rm == rm)))
    index = 0
    while f"{base}.{index}" in taken:
        index += 1
    return f"{base}.{index}"


def set_reservation(session: Session, rm: str, request: ResourceRequest, *, start: datetime,
                    end: datetime | None, acl: Mapping[str, Sequence[str]], now: datetime,
                    name: str | None = None, registry: Any = None) -> Reservation:
    """setres: validate on the RM's loaded core, store (kind admin), flush; returns the row.

    ``end`` None means no end (INFINITY).  Refusals raise ReservationRefused or
    ReservationError naming why; nothing is stored then.
    """
    check_rm(session, rm)
    stored_acl = acl_from(acl)
    name = name or _default_name(session, rm, stored_acl)
    if session.scalars(select(Reservation.id).where(Reservation.rm == rm,
                                                    Reservation.name == name)).first():
        raise ReservationError(f"reservation {name!r} already exists on {rm}")
    if end is not None and end <= max(start, now):
        raise ReservationError(f"reservation {name}: end {iso(end)} is not after its start")
    sched = load_scheduler(session, rm, now, registry)
    core = CoreReservation(name=name, start=epoch(max(start, now)),
                           end=INFINITE if end is None else epoch(end),
                           acl=ACL.build(**stored_acl), tasks=request.tasks,
                           procs_per_task=request.procs_per_task,
                           mem_per_task=request.mem_per_task, nodes=request.nodes)
    try:
        # jobs the ACL admits may keep running inside it, as the live loader takes them in
        placed = sched.add_reservation(core, epoch(now), take_in_admitted=True)
    except ReservationRefused as exc:
        interval = (f"[{iso(max(start, now))}, "
                    f"{'INFINITY' if end is None else iso(end)})")
        raise ReservationRefused(_INTERVAL_RE.sub(interval, str(exc))) from None
    per_node = {n: (k * request.procs_per_task if request.tasks else
                    sched.engine.nodes[n].procs) for n, k in placed.allocation.items()}
    row = Reservation(
        name=name, rm=rm, kind=ReservationKind.ADMIN, acl=stored_acl,
        nodes=sorted(per_node) if request.tasks else list(request.nodes),
        resources={"tasks": request.tasks, "procs_per_task": request.procs_per_task,
                   "mem_per_task": request.mem_per_task, "procs_by_node": per_node},
        start_time=max(start, now), end_time=FOREVER if end is None else end)
    session.add(row)
    session.flush()
    return row


def release_reservations(session: Session, names: Sequence[str], rm: str | None = None) -> list[Reservation]:
    """releaseres: delete the named administrative reservations (all checked first)."""
    rows = releasable(session, names, rm)
    for row in rows:
        session.delete(row)
    session.flush()
    return rows


def releasable(session: Session, names: Sequence[str], rm: str | None = None) -> list[Reservation]:
    """The administrative reservations ``names`` stand for (on ``rm`` if given), each
    checked: NotFoundError for an unknown name, ReservationError for an ambiguous or
    non-administrative one."""
    check_rm(session, rm)
    rows = []
    for name in names:
        stmt = select(Reservation).where(Reservation.name == name)
        if rm is not None:
            stmt = stmt.where(Reservation.rm == rm)
        found = list(session.scalars(stmt))
        if not found:
            raise NotFoundError(f"unknown reservation {name!r}"
                                + (f" on {rm}" if rm else ""))
        if len(found) > 1:
            raise ReservationError(f"reservation {name!r} exists on "
                                   f"{', '.join(sorted(str(r.rm) for r in found))}: give -r RM")
        if found[0].kind is not ReservationKind.ADMIN:
            raise ReservationError(f"reservation {name!r} is a {found[0].kind.value} "
                                   f"reservation; only administrative ones are released here")
        rows.append(found[0])
    return rows


def reservation_rms(session: Session, names: Sequence[str],
                    rm: str | None = None) -> dict[str, list[str]]:
    """RM -> the names to release there (every name checked first, as releaseres does)."""
    out: dict[str, list[str]] = {}
    for row in releasable(session, names, rm):
        out.setdefault(str(row.rm), []).append(row.name)
    return out


@dataclass(frozen=True)
class ResRow:
    """One showres line."""

    name: str
    rm: str | None
    kind: str
    start: datetime
    end: datetime | None  # None: INFINITY
    procs_by_node: dict[str, int]
    acl: dict[str, list[str]]
    job_id: int | None

    def state(self, now: datetime) -> str:
        return "Active" if self.start <= now else "Idle"

    def to_dict(self, now: datetime) -> dict[str, Any]:
        duration = None if self.end is None else (self.end - self.start).total_seconds()
        return {"name": self.name, "rm": self.rm, "type": self.kind, "state": self.state(now),
                "start": iso(self.start), "end": iso(self.end),
                "start_in": json_seconds((self.start - now).total_seconds()),
                "end_in": json_seconds(INFINITE if self.end is None
                                       else (self.end - now).total_seconds()),
                "duration": json_seconds(INFINITE if duration is None else duration),
                "nodes": len(self.procs_by_node), "procs": sum(self.procs_by_node.values()),
                "procs_by_node": self.procs_by_node, "acl": self.acl, "job_id": self.job_id}


def _sql_row(res: Reservation, node_procs: Callable[[str], int]) -> ResRow:
    per_node = (res.resources or {}).get("procs_by_node")
    if not isinstance(per_node, dict):
        per_node = {}
        for n in res.nodes or []:
            held = reservation_procs(res, n)
            per_node[n] = node_procs(n) if held < 0 else held
    end = None if res.end_time >= FOREVER - timedelta(days=1) else res.end_time
    return ResRow(res.name, res.rm, res.kind.value.capitalize(), res.start_time, end,
                  {k: int(v) for k, v in per_node.items()}, dict(res.acl or {}), res.owner_job_id)


def show_reservations(session: Session, now: datetime, rm: str | None = None) -> list[ResRow]:
    """showres: reservations (admin, grid, job) still to come or under way, plus the
    job reservation every running job holds until its walltime ends; by start."""
    check_rm(session, rm)
    procs = {(n.rm, n.name): n.procs for n in repository.list_nodes(session, rm)}
    stmt = select(Reservation).where(Reservation.end_time > now)
    if rm is not None:
        stmt = stmt.where(Reservation.rm == rm)
    rows = [_sql_row(r, lambda n, r=r: procs.get((r.rm, n), 0)) for r in session.scalars(stmt)]
    jobs = select(Job).where(Job.state.in_(list(ACTIVE_GRAM)))
    if rm is not None:
        jobs = jobs.where(Job.rm == rm)
    for job in session.scalars(jobs):
        if job.start_time is None or not job.nodes_allocated:
            continue
        ppt = max(1, job.procs // max(1, job.tasks))
        end = job.start_time + timedelta(seconds=job.walltime) if job.walltime else None
        rows.append(ResRow(f"job.{job.id}", job.rm, "Job", job.start_time, end,
                           {n: int(k) * ppt for n, k in job.nodes_allocated.items()},
                           {"jobs": [str(job.id)]}, job.id))
    return sorted(rows, key=lambda r: (r.start, r.name))
