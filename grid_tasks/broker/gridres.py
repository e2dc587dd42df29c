"""Grid-level planning commands: ``showstart`` across all RMs and named co-reservations.

* :func:`grid_start` - when could a request start anywhere: every candidate RM's
  estimates for a single request, the planner's common starts for a multi-request;
* :func:`set_grid_reservation` - a named co-reservation across RMs made through the
  broker (placement, estimates, tokens, ``reserve`` on every RM); its parts are grid
  reservations ``NAME.LABEL``, their tokens confirmed under ``NAME``;
* :func:`show_grid_reservations` - the co-reservations, from the durable grid
  reservation rows (grouped by the job key each carries), with their per-RM parts;
* :func:`release_grid_reservations` - release every part on its RM and the tokens.

A grid reservation request is ``N@RM`` items (N processors on that RM), bare ``N``
items (N processors wherever the broker finds them), comma-separated, or an RSL
request whose components are placed like a job's (:func:`parse_grid_spec`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from grid_tasks.broker.coreservation import CoReservation, iso
from grid_tasks.broker.live import Broker
from grid_tasks.broker.placement import too_small
from grid_tasks.broker.remote import requester_dict
from grid_tasks.db import Reservation, ReservationKind
from grid_tasks.errors import GridTasksError, NotFoundError
from grid_tasks.legion.collection import Requester
from grid_tasks.rsl import lower
from grid_tasks.rsl.lower import SubjobRequest
from grid_tasks.utc import as_utc

__all__ = ["GridReservationError", "GridPart", "GridReservation", "grid_start",
           "parse_grid_spec", "set_grid_reservation", "show_grid_reservations",
           "release_grid_reservations"]

_ITEM = re.compile(r"^(\d+)(?:@([A-Za-z0-9_-]+))?$")


class GridReservationError(GridTasksError):
    """A grid reservation request that cannot be read or honoured (says which part, why)."""


def _seconds_text(seconds: float) -> float | str:
    return "INFINITY" if seconds == float("inf") else round(seconds, 3)


# -- showstart across RMs ---------------------------------------------------------------------

def grid_start(broker: Broker, subs: Sequence[SubjobRequest], *, now: float,
               requester: Requester | None, limit: int = 3,
               not_before: float | None = None) -> dict[str, Any]:
    """showstart without an RM: per-RM estimates (one component) or common starts."""
    comps = broker.components(subs, requester)
    t0 = now if not_before is None else max(now, not_before)
    report: dict[str, Any] = {"now": iso(now), "components": [c.to_dict() for c in comps]}
    if len(comps) == 1:
        comp = comps[0]
        asks = [(rm, comp.procs, comp.duration, t0) for rm in comp.candidates]
        rows = []
        answers = broker.remote.estimate(asks, limit=limit,
                                         requester=requester_dict(requester))
        for (rm, *_), outcome in zip(asks, answers):
            starts = outcome.value if outcome.ok else []
            rows.append({"rm": rm, "answer": "ok" if starts else (
                "never" if outcome.ok else outcome.reason()),
                "estimates": [{"start": iso(t), "start_in": round(t - now, 3),
                               "allocation": alloc} for t, alloc in starts]})
        rows += _never_rows(broker, comp, set(comp.candidates))
        best = [(r["estimates"][0]["start"], r["rm"]) for r in rows if r["estimates"]]
        report.update(kind="single", not_before=iso(t0), rms=rows,
                      best=min(best)[1] if best else None)
        return report
    # a common start needs time to be reserved: not before now + the broker's lead
    planned = broker.plan(comps, now=now, requester=requester, not_before=not_before,
                          limit=limit)
    labels = [c.label for c in comps]
    report.update(kind="multi", not_before=iso(planned.not_before),
                  warnings=list(planned.warnings), schedules=[
        {"start": iso(s.start), "start_in": round(s.start - now, 3), "end": iso(s.end),
         "placements": [{"label": labels[p.subjob], "rm": p.rm, "allocation": dict(p.nodes)}
                        for p in s.placements]} for s in planned.schedules])
    return report


def _never_rows(broker: Broker, comp: Any, candidates: set[str]) -> list[dict[str, Any]]:
    """A row for every RM the request can never use, saying why: "every RM" lists them all."""
    rows = []
    for res in broker.collection().resources("rm"):
        if res.rm in candidates:
            continue
        why = (too_small(comp.sub, res) if comp.sub is not None else None) or (
            "not open to this requester or not matching the requirements")
        rows.append({"rm": res.rm, "answer": f"never: {why}", "estimates": []})
    return rows


# -- grid reservation requests ----------------------------------------------------------------

def parse_grid_spec(text: str, duration: float | None) -> list[SubjobRequest]:
    """``N@RM,N,...`` or an RSL request, as subjob requests held ``duration`` seconds.

    With RSL, ``duration`` (when given) overrides each component's walltime.
    """
    stripped = text.strip()
    if stripped[:1] in ("&", "+", "("):
        subs = lower(stripped, source="<grid reservation>")
        if duration is not None:
            for sub in subs:
                sub.max_wall_time_s = _duration(duration)
        return subs
    if duration is None:
        raise GridReservationError("a grid reservation needs -d DURATION or -e ENDTIME")
    subs = []
    for index, item in enumerate(p.strip() for p in stripped.split(",")):
        match = _ITEM.match(item)
        if not match or int(match.group(1)) < 1:
            raise GridReservationError(
                f"grid reservation item {index + 1} {item!r}: expected PROCS@RM or PROCS "
                "(e.g. 4@rmA,2@rmB or 4), or an RSL request")
        rm = match.group(2)
        subs.append(SubjobRequest(index=index, executable="", rm_contact=rm,
                                  label=rm if rm and _unique(stripped, rm) else f"part{index}",
                                  count=int(match.group(1)),
                                  max_wall_time_s=_duration(duration)))
    return subs


def _unique(text: str, rm: str) -> bool:
    return sum(1 for item in text.split(",") if item.strip().endswith(f"@{rm}")) == 1


def _duration(seconds: float) -> int:
    if not 0 < seconds < float("inf"):
        raise GridReservationError(f"a grid reservation needs a finite positive duration, "
                                   f"got {_seconds_text(seconds)}")
    return max(1, int(round(seconds)))


def set_grid_reservation(broker: Broker, session: Session, name: str,
                         subs: Sequence[SubjobRequest], *, now: float, not_before: float,
                         requester: Requester | None) -> CoReservation:
    """Co-reserve ``subs`` as grid reservation ``name`` (refused if the name is taken)."""
    if not name or "|" in name or "." in name:
        raise GridReservationError(f"bad grid reservation name {name!r}: non-empty, without "
                                   "'.' or '|'")
    if _rows(session, [name]).get(name):
        raise GridReservationError(f"grid reservation {name!r} already exists")
    comps = broker.components(subs, requester)
    return broker.coreserve(comps, now=now, job_key=name, requester=requester,
                            not_before=max(now, not_before))


# -- listing and release ------------------------------------------------------------------------

@dataclass(frozen=True)
class GridPart:
    """One grid reservation row of a co-reservation."""

    rm: str
    name: str
    label: str | None
    start: datetime
    end: datetime
    procs_by_node: dict[str, int]
    token: str | None
    job_id: int | None

    def to_dict(self) -> dict[str, Any]:
        return {"rm": self.rm, "reservation": self.name, "label": self.label,
                "start": self.start.isoformat(timespec="seconds"),
                "end": self.end.isoformat(timespec="seconds"),
                "procs": sum(self.procs_by_node.values()), "procs_by_node": self.procs_by_node,
                "token": self.token, "job_id": self.job_id}


@dataclass(frozen=True)
class GridReservation:
    """A co-reservation: its name (job key) and parts."""

    name: str
    parts: tuple[GridPart, ...]

    @property
    def start(self) -> datetime:
        return min(p.start for p in self.parts)

    @property
    def end(self) -> datetime:
        return max(p.end for p in self.parts)

    def state(self, now: datetime) -> str:
        return "Active" if self.start <= now else "Idle"

    def to_dict(self, now: datetime) -> dict[str, Any]:
        return {"name": self.name, "state": self.state(now),
                "start": self.start.isoformat(timespec="seconds"),
                "end": self.end.isoformat(timespec="seconds"),
                "start_in": round((self.start - now).total_seconds(), 3),
                "rms": list(dict.fromkeys(p.rm for p in self.parts)),
                "procs": sum(sum(p.procs_by_node.values()) for p in self.parts),
                "parts": [p.to_dict() for p in self.parts]}


def _rows(session: Session, names: Sequence[str] | None = None,
          now: datetime | None = None) -> dict[str, list[Any]]:
    """Grid reservation rows by job key (only ``names``; only not ended at ``now``)."""
    stmt = select(Reservation).where(Reservation.kind == ReservationKind.GRID)
    if now is not None:
        stmt = stmt.where(Reservation.end_time > now)
    out: dict[str, list[Any]] = {}
    for row in session.scalars(stmt.order_by(Reservation.start_time, Reservation.id)):
        key = (row.resources or {}).get("job_key") or row.name
        if names is None or key in names:
            out.setdefault(str(key), []).append(row)
    return out


def _part(row: Any) -> GridPart:
    res = row.resources or {}
    return GridPart(str(row.rm), row.name, res.get("label"), as_utc(row.start_time),
                    as_utc(row.end_time),
                    {str(n): int(p) for n, p in (res.get("procs_by_node") or {}).items()},
                    row.token, row.owner_job_id)


def show_grid_reservations(session: Session, now: datetime) -> list[GridReservation]:
    """Co-reservations not ended yet (grid jobs' included), by start."""
    # parts are reserved in parallel, so row ids say nothing: list them by RM
    found = [GridReservation(key, tuple(sorted((_part(r) for r in rows),
                                               key=lambda p: (p.rm, p.name))))
             for key, rows in _rows(session, None, now).items()]
    return sorted(found, key=lambda g: (g.start, g.name))


def release_grid_reservations(broker: Broker, session: Session,
                              names: Sequence[str]) -> list[dict[str, Any]]:
    """Release every part of each named co-reservation on its RM, and its tokens.

    All names are checked first: one unknown name releases none (NotFoundError).
    """
    rows = _rows(session, list(names))
    missing = [n for n in names if n not in rows]
    if missing:
        raise NotFoundError(f"unknown grid reservation(s) {', '.join(map(repr, missing))}")
    out = []
    for name in names:
        parts = [_part(r) for r in rows[name]]
        outcomes = broker.remote.release([{"rm": p.rm, "name": p.name, "token": p.token}
                                          for p in parts])
        tokens = broker.release_tokens(name)
        out.append({"name": name, "tokens_released": tokens, "parts": [
            {"rm": p.rm, "reservation": p.name,
             "released": bool(o.ok and o.value), "error": None if o.ok else o.reason()}
            for p, o in zip(parts, outcomes)]})
    return out
