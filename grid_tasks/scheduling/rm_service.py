"""The native Maui RM's side of the metascheduler protocol (seed 002, section 3.3).

Behind the one RM interface (:class:`~grid_tasks.scheduling.native_rm.NativeRM`; a Slurm
cluster is :mod:`~grid_tasks.scheduling.slurm_rm`, which shares the request checks and
the grid rows kept here), a native RM answers two calls backed by its Maui core, plus
their undo:

* :func:`estimate` - when could ``procs`` processors be held for ``duration`` seconds,
  at or after ``not_before``: the RM's core loaded from SQL, run once in memory (so
  running jobs, reservations and the idle queue's priorities count, exactly as
  ``showstart`` sees them), then asked for start times;
* :func:`reserve` - hold an exact allocation (``{node: procs}``) over
  ``[start, start + duration)`` for one grid job: checked node by node against the
  core (running jobs' walltimes, every other reservation, node liveness: never an
  overcommit), then stored as a confirmed SQL reservation of kind ``grid`` carrying the
  broker's token.  Idempotent per ``(rm, name, token)``;
* :func:`release` - delete such a reservation (idempotent);
* :func:`mark_enacted` - the broker, once it confirmed the tokens, records durably that
  the co-reservation is complete; only rows so marked are restored into a token store
  that lost its state (:mod:`grid_tasks.scheduling.grid_reservations`).  The RM honours
  a grid reservation from ``reserve`` on either way (no local job slips into the slot).

Reservation checks of one RM are serialised by a lock on its ``resource_managers`` row
(``SELECT ... FOR NO KEY UPDATE`` on PostgreSQL, a first write on SQLite), so two
concurrent reserves can never both take the last free slot.  Functions take a session,
the RM and ``now`` (POSIX seconds); the Celery tasks in :mod:`grid_tasks.scheduling.rm_tasks` stay thin.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, text, tuple_
from sqlalchemy.orm import Session

from grid_tasks.db import Reservation, ReservationKind, repository
from grid_tasks.db.models import ResourceManager
from grid_tasks.gram.binding import unbind
from grid_tasks.legion.tokens_model import ENACTED
from grid_tasks.legion.refusals import ReservationRefused
from grid_tasks.maui import ACL
from grid_tasks.maui import Reservation as CoreReservation
from grid_tasks.maui import ReservationRefused as CoreRefused
from grid_tasks.scheduling.plan import load_plan
from grid_tasks.scheduling.requester import Requester
from grid_tasks.scheduling.state import load_scheduler
from grid_tasks.utc import epoch, from_epoch, iso_seconds

__all__ = ["ReservationRefused", "Requester", "estimate", "reserve", "release",
           "describe", "lock_rm", "find_grid_reservation", "mark_enacted"]

#: Longest reservation name and token stored (the SQL column widths).
MAX_NAME = 128


def number(name: str, value: Any, *, positive: bool = True) -> float:
    """``value`` as a finite (``positive``) float, else a ``bad_request`` refusal naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ReservationRefused(f"{name} must be a finite number, got {value!r}", "bad_request")
    if positive and not value > 0:
        raise ReservationRefused(f"{name} must be positive, got {value!r}", "bad_request")
    return float(value)


def count(name: str, value: Any) -> int:
    """``value`` as an integer >= 1, else a ``bad_request`` refusal naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ReservationRefused(f"{name} must be an integer >= 1, got {value!r}", "bad_request")
    return value


# --- estimate ----------------------------------------------------------------------------

def estimate(session: Session, rm: str, *, procs: int, duration: float, not_before: float,
             now: float, limit: int = 3, requester: Mapping[str, Any] | None = None,
             registry: Any = None) -> list[dict[str, Any]]:
    """Possible starts at or after ``max(now, not_before)``, earliest first:
    ``[{"time": epoch, "allocation": {node: procs}}]``; ``[]`` means never.

    Reservations whose ACL admits ``requester`` count as usable.  :func:`reserve`,
    however, never carves a grid reservation out of another reservation (the live loader
    charges every reservation on free resources only), so a start found inside such a
    reservation may be refused there; the broker then tries its next candidate.  Raises
    NotFoundError for an unknown RM, :class:`ReservationRefused` for a bad request.
    """

    procs, limit = count("procs", procs), count("limit", limit)
    duration = number("duration", duration)
    t0 = max(float(now), number("not_before", not_before, positive=False))
    who = Requester.from_dict(requester)
    plan = load_plan(session, rm, from_epoch(now), registry=registry, iterate=True,
                     breakdowns=False)
    probe = who.probe("grid.estimate", procs, duration, now)
    found = plan.scheduler.estimate(probe, t0, limit)
    out = [{"time": float(e.time), "allocation": {str(n): int(k) for n, k in e.allocation.items()}}
           for e in found if math.isfinite(e.time)]
    return sorted(out, key=lambda e: e["time"])


# --- reserve / release --------------------------------------------------------------------

def lock_rm(session: Session, rm: str) -> None:
    """Serialise reservation decisions of ``rm`` until the transaction ends.

    PostgreSQL: a row lock that does not block job inserts referencing the RM.  SQLite:
    a first write takes the database's write lock, and the read snapshot then starts
    after any concurrent reserve committed.  NotFoundError for an unknown RM.
    """
    if session.get_bind().dialect.name == "sqlite":
        done = session.execute(text("UPDATE resource_managers SET attributes = attributes "
                                    "WHERE name = :rm"), {"rm": rm}).rowcount
    else:
        done = session.execute(select(ResourceManager.name).where(ResourceManager.name == rm)
                               .with_for_update(key_share=True)).first() is not None
    if not done:
        repository.get_rm(session, rm)  # raises NotFoundError naming the known RMs


def find_grid_reservation(session: Session, rm: str, name: str) -> Reservation | None:
    """The reservation ``name`` of ``rm`` (any kind), or None."""
    return session.scalars(select(Reservation).where(Reservation.rm == rm,
                                                     Reservation.name == name)).first()


def describe(row: Reservation) -> dict[str, Any]:
    """What :func:`reserve` returns: ``{"rm","name","id","start","end","allocation"}``."""
    alloc = (row.resources or {}).get("procs_by_node") or {}
    return {"rm": row.rm, "name": row.name, "id": row.id, "start": epoch(row.start_time),
            "end": epoch(row.end_time), "allocation": {str(n): int(p) for n, p in alloc.items()}}


def check_text(name: str, value: Any) -> str:
    """A name or token that fits its SQL column, else a ``bad_request`` refusal."""
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME:
        raise ReservationRefused(f"{name} must be a non-empty string of at most {MAX_NAME} "
                                 f"characters, got {value!r}", "bad_request")
    return value


def check_allocation(rm: str, name: str, allocation: Any) -> dict[str, int]:
    """A non-empty ``{node: procs}``, sorted by node, else a ``bad_request`` refusal."""
    if not isinstance(allocation, Mapping) or not allocation:
        raise ReservationRefused(f"grid reservation {name} on {rm}: allocation must be a "
                                 f"non-empty {{node: procs}} mapping, got {allocation!r}",
                                 "bad_request")
    return {str(node): count(f"allocation[{node!r}]", procs)
            for node, procs in sorted(allocation.items())}


@dataclass(frozen=True)
class Ask:
    """A checked ``reserve`` request: what every RM kind stores for a grid reservation."""

    rm: str
    name: str
    allocation: dict[str, int]
    start: float
    end: float
    token: str
    job_key: str
    label: str | None
    allow_early: bool
    requester: Requester

    @classmethod
    def check(cls, rm: str, *, name: str, allocation: Any, start: Any, duration: Any,
              token: str, job_key: str, label: str | None = None, allow_early: bool = False,
              requester: Mapping[str, Any] | None = None) -> "Ask":
        """Every argument checked (:class:`ReservationRefused` ``bad_request`` naming it)."""
        check_text("reservation name", name)
        check_text("token", token)
        check_text("job_key", job_key)
        alloc = check_allocation(rm, name, allocation)
        begin = number("start", start, positive=False)
        length = number("duration", duration)
        return cls(rm, name, alloc, begin, begin + length, token, job_key, label,
                   bool(allow_early), Requester.from_dict(requester))

    def row(self, **extra: Any) -> Reservation:
        """The confirmed SQL row of kind ``grid`` (``extra``: more of ``resources``)."""
        return Reservation(
            name=self.name, rm=self.rm, kind=ReservationKind.GRID, confirmed=True,
            token=self.token, acl={"jobs": []}, nodes=sorted(self.allocation),
            start_time=from_epoch(self.start), end_time=from_epoch(self.end),
            resources={"tasks": sum(self.allocation.values()), "procs_per_task": 1,
                       "procs_by_node": self.allocation, "job_key": self.job_key,
                       "label": self.label, "allow_early": self.allow_early,
                       "requester": self.requester.to_dict(), **extra})


def begin_reserve(session: Session, ask: Ask, now: float) -> dict[str, Any] | None:
    """Lock the RM, then: the existing reservation for a retried ``(rm, name, token)``,
    or None when ``ask`` may be made; refuses a name taken by another token and a
    reservation that would end in the past."""
    lock_rm(session, ask.rm)
    existing = find_grid_reservation(session, ask.rm, ask.name)
    if existing is not None:
        if existing.kind is ReservationKind.GRID and existing.token == ask.token:
            return describe(existing)  # a retried or redelivered reserve
        raise ReservationRefused(f"reservation name {ask.name!r} is already taken on {ask.rm} "
                                 f"(by a {existing.kind.value} reservation with another "
                                 "token)", "taken")
    if ask.end <= now:
        raise ReservationRefused(f"grid reservation {ask.name} on {ask.rm}: it would end at "
                                 f"{iso_seconds(ask.end)}, in the past", "past")
    return None


def reserve(session: Session, rm: str, *, name: str, allocation: Mapping[str, int],
            start: float, duration: float, token: str, job_key: str, now: float,
            label: str | None = None, allow_early: bool = False,
            requester: Mapping[str, Any] | None = None, registry: Any = None) -> dict[str, Any]:
    """Hold ``allocation`` on ``rm`` over ``[start, start + duration)`` for one grid job.

    Checks each node against the RM's core (never an overcommit), then stores a
    confirmed ``grid`` reservation carrying ``token``; the job submitted later with
    ``(reservation=name)`` is bound to it (see :mod:`grid_tasks.gram.binding`).
    The same ``(rm, name, token)`` again returns the existing reservation.  Raises
    :class:`ReservationRefused` saying why, NotFoundError for an unknown RM.
    """
    ask = Ask.check(rm, name=name, allocation=allocation, start=start, duration=duration,
                    token=token, job_key=job_key, label=label, allow_early=allow_early,
                    requester=requester)
    again = begin_reserve(session, ask, now)
    if again is not None:
        return again
    _check_core(session, rm, name, ask.allocation, ask.start, ask.end, now, registry,
                ask.requester)
    row = ask.row()
    session.add(row)
    session.flush()
    return describe(row)


def _check_core(session: Session, rm: str, name: str, alloc: dict[str, int], start: float,
                end: float, now: float, registry: Any, who: Requester) -> None:
    """Place the allocation node by node on the RM's loaded core; refuse what does not fit.

    No in-memory iteration: a reservation takes precedence over idle jobs (the loader
    adds reservations before queueing them), so only running jobs, other reservations
    and node states can refuse it.  Reservations admitting the requester lend it their
    resources, exactly as :func:`estimate` counted them.
    """

    sched = load_scheduler(session, rm, now=now, registry=registry)
    known = sched.engine.nodes
    within = who.probe(f"grid.{name}", sum(alloc.values()), end - start, now)
    for node, procs in alloc.items():
        if node not in known:
            raise ReservationRefused(f"grid reservation {name} on {rm}: no node {node!r} (nodes: "
                                     f"{', '.join(sorted(known)) or 'none'})", "unknown_node")
        hold = CoreReservation(name=f"{name}@{node}", start=start, end=end, acl=ACL(),
                               tasks=procs, procs_per_task=1, nodes=(node,))
        try:
            sched.add_reservation(hold, now, within=within)
        except CoreRefused:
            raise ReservationRefused(
                f"grid reservation {name} on {rm}: node {node} cannot hold {procs} "
                f"processors over [{iso_seconds(max(start, now))}, {iso_seconds(end)}) (running jobs, other "
                "reservations or the node's state leave too few)", "busy") from None


def release(session: Session, rm: str, *, name: str, token: str | None = None,
            now: float | None = None,
            forget: Callable[[Reservation], None] | None = None) -> bool:
    """Delete grid reservation ``name`` of ``rm``; True if a row was deleted.

    With ``token``, only a reservation holding that token.  A job bound to it becomes an
    ordinary idle job again.  ``forget(row)`` runs before the delete (the task releases
    the row's claims mirrored into the token store there).  Releasing a non-grid
    reservation is refused.
    """
    check_text("reservation name", name)
    repository.get_rm(session, rm)
    row = find_grid_reservation(session, rm, name)
    if row is None or (token is not None and row.token != token):
        return False
    if row.kind is not ReservationKind.GRID:
        raise ReservationRefused(f"reservation {name!r} on {rm} is a {row.kind.value} "
                                 "reservation; only grid reservations are released here",
                                 "not_grid")

    unbind(session, row, "grid reservation released by the broker", now)
    if forget is not None:
        forget(row)
    session.delete(row)
    session.flush()
    return True


def mark_enacted(session: Session, parts: Iterable[tuple[str, str, str]]) -> int:
    """Mark the grid reservations ``(rm, name, token)`` as enacted (their broker confirmed
    the tokens): :data:`~grid_tasks.legion.tokens_model.ENACTED` in ``resources``.

    Called by the broker right after ``TokenStore.confirm``, in one transaction.
    Idempotent; returns how many of ``parts`` are marked now (a part whose row is gone,
    or holds another token, is not counted).
    """
    wanted = {(str(rm), str(name)): str(token) for rm, name, token in parts}
    if not wanted:
        return 0
    rows = session.scalars(select(Reservation).where(
        Reservation.kind == ReservationKind.GRID,
        tuple_(Reservation.rm, Reservation.name).in_(list(wanted)))
        .execution_options(populate_existing=True))
    marked = 0
    for row in rows:
        if wanted.get((row.rm, row.name)) != row.token:
            continue
        if not (row.resources or {}).get(ENACTED):
            # a new dict: the JSON column tracks assignment, not in-place changes
            row.resources = {**(row.resources or {}), ENACTED: True}
        marked += 1
    session.flush()
    return marked
