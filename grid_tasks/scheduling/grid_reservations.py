"""Grid reservations in the live iteration: restore, prune, and the veto at start.

A grid reservation (kind ``grid``, made by :func:`grid_tasks.scheduling.rm_service.reserve`)
carries the broker's reservation token; the token store (:class:`TokenStore` on the
settings' Redis) says whether it is still held.  Each iteration of an RM, before its
core is loaded, calls :func:`prepare`:

1. **restore** - Redis may have lost the store (restart, FLUSHALL).  A sentinel key that
   a fresh Redis lacks tells; then every durable reservation in SQL (administrative,
   confirmed job ones, and grid ones their broker marked enacted after confirming the
   tokens, of every RM) is mirrored back as confirmed claims and the node capacities
   are set again (:func:`ensure_restored`), so valid reservations are never pruned nor
   vetoed after a Redis restart.  A grid row without the mark is half-made (its broker
   may have died before confirming): it is not revived, and is pruned like any
   reservation whose token is gone.  While the store cannot be read or
   restored the guard is *blind*: nothing is pruned and bound jobs wait;
2. **prune** - grid reservations that ended, whose job finished, or whose token is
   neither held nor younger than :data:`PRUNE_AFTER_S` (a broker died between reserve
   and confirm) are deleted; a waiting job bound to one becomes an ordinary idle job.

After the core decided, :meth:`GridGuard.veto` is Legion's ``start_object(token)``: a job
bound to a grid reservation starts only if its token is held and confirmed; a token
expired or released starts nothing, the reservation is deleted and the job unbound
(the RM reschedules it like any idle job), the reason in the job's history.  The veto
also locks the RM (as ``reserve`` does) and makes the iteration run again if a grid
reservation was made while it was deciding, so a start never overcommits one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Iterable

from sqlalchemy import bindparam, func, inspect, select
from sqlalchemy.orm import Session

from grid_tasks.db import Reservation, ReservationKind, repository
from grid_tasks.db.errors import ConcurrentUpdateError
from grid_tasks.db.models import Job as JobRow
from grid_tasks.errors import GridTasksError
from grid_tasks.gram.binding import unbind
from grid_tasks.legion.collection import durable_claims
from grid_tasks.legion.tokens import Token, TokenStore
from grid_tasks.scheduling.rm_service import lock_rm
from grid_tasks.utc import as_utc, from_epoch

log = logging.getLogger(__name__)

#: A grid reservation whose token is not held is kept this long after it was made (the
#: broker confirms its tokens right after the RMs accepted): twice the default token TTL.
PRUNE_AFTER_S = 60.0
#: Suffix of the key marking a token store restored from SQL (absent in a fresh Redis).
SENTINEL = ":restored"
_RESTORING = ":restoring"

OK, WAIT, GONE = "ok", "wait", "gone"
_stores: dict[int, TokenStore] = {}


def token_store(client: Any) -> TokenStore:
    """The default :class:`TokenStore` on ``client`` (cached per client)."""
    store = _stores.get(id(client))
    if store is None or store.client is not client:
        store = _stores[id(client)] = TokenStore(client)
    return store


def mirror_ids(row: Reservation) -> list[str]:
    """Token ids under which :func:`ensure_restored` mirrors ``row`` (see ``durable_claims``)."""
    group = f"sql.{row.rm}.{row.name}"
    return [f"{group}#{row.rm}/{node}" for node in sorted(row.nodes or ())]


def claims_of(store: TokenStore, row: Reservation) -> list[str]:
    """Ids of the confirmed broker tokens behind grid reservation ``row`` on its RM.

    A co-reserved job that ends early (or a reservation that is over) would otherwise
    keep them until their interval ends, and brokers would plan around processors that
    are free.  ``row.token`` is a token id of the placement or the job key the confirmed
    tokens are grouped under."""
    if not row.token:
        return []
    first = store.get(row.token)
    group = first.group if first is not None else row.token
    mine = f"{row.rm}/"
    return [t.id for t in store.tokens()
            if t.confirmed and t.group == group and t.resource.startswith(mine)]


def release_tokens_of(store: TokenStore, row: Reservation) -> None:
    """Release what the token store holds for grid reservation ``row`` of a dropped
    reservation (its mirror after a restore, its broker's confirmed tokens on its RM):
    called by the one writer of the RM's grid reservations as it deletes ``row``.
    Errors are only logged: stale claims block brokers, never overcommit a node."""
    try:
        store.release(mirror_ids(row) + claims_of(store, row))
    except GridTasksError as exc:
        log.warning("rm %s: tokens of %s not released: %s", row.rm, row.name, exc)


def ensure_restored(store: TokenStore, session: Session, now: float) -> bool:
    """Restore the store from SQL if it lost its state; True when it is usable.

    False while another process restores it (the caller must then act blind).
    """
    client = store.client
    if client.exists(store.prefix + SENTINEL):
        return True
    if not client.set(store.prefix + _RESTORING, 1, nx=True, px=30_000):
        return False
    try:
        capacities = {f"{n.rm}/{n.name}": int(n.procs) for n in repository.list_nodes(session)
                      if int(n.procs or 0) > 0}
        at = from_epoch(now)
        rows = list(session.scalars(select(Reservation).where(Reservation.end_time > at)))
        known = _known_tokens(store) if rows else set()
        durable = durable_claims([r for r in rows if _lost(r, known)], capacities)
        _forget(session, rows)
        store.restore(capacities, durable)
        client.set(store.prefix + SENTINEL, repr(now))
        log.warning("token store restored from SQL: %d durable reservations, %d resources",
                    len(durable), len(capacities))
        return True
    finally:
        client.delete(store.prefix + _RESTORING)


def _forget(session: Session, rows: Iterable[Reservation]) -> None:
    """Detach reservation rows read here: the loader reads them again, and an object
    left in the session's identity map would hand it these (possibly stale) attributes,
    e.g. a binding committed by a submission in the meantime."""
    for row in rows:
        if inspect(row).persistent:
            session.expunge(row)


def _known_tokens(store: TokenStore) -> set[str]:
    """Token ids (expired ones included) and groups of confirmed tokens in the store."""
    tokens, _ = store.snapshot()
    return {t.id for t in tokens} | {t.group for t in tokens if t.confirmed}


def _lost(row: Reservation, known: set[str]) -> bool:
    """Whether the store lost ``row``: a grid reservation whose token it still knows
    (by id or as a group) was not lost, and mirroring it would count it twice."""
    return not (row.kind is ReservationKind.GRID and row.token and row.token in known)


@dataclass
class GridGuard:
    """The grid reservations of one RM during one iteration (see the module docstring)."""

    rm: str
    now: float
    store: TokenStore | None
    rows: list[Reservation] = field(default_factory=list)
    last_id: int = 0
    blind: bool = False
    _groups: dict[str, list[Token]] | None = None

    def state(self, row: Reservation) -> str:
        """OK (token held and confirmed), WAIT (not yet confirmed, or the store cannot
        be read) or GONE (expired, released or never issued)."""
        if self.blind or self.store is None:
            return WAIT
        try:
            return self._state(row)
        except GridTasksError as exc:  # Redis unreachable: never act on a guess
            log.warning("rm %s: token of grid reservation %s unreadable: %s", self.rm,
                        row.name, exc)
            self.blind = True
            return WAIT

    def _state(self, row: Reservation) -> str:
        assert self.store is not None
        token = self.store.get(row.token or "-")
        if token is not None:
            if token.confirmed:
                return OK
            # unconfirmed: the broker may still confirm it, until it expires
            return WAIT if (token.expires_ms or 0) > self.store.server_ms() else GONE
        ids = mirror_ids(row)
        if ids and (mirrored := self.store.get(ids[0])) is not None and mirrored.confirmed:
            return OK  # restored from SQL after the store was lost
        held = self._group(row.token or "-")
        return OK if any(t.resource.startswith(f"{self.rm}/") for t in held) else GONE

    def _group(self, group: str) -> list[Token]:
        """Confirmed tokens bound to ``group`` (a broker may name its job key as token)."""
        if self._groups is None:
            assert self.store is not None
            self._groups = {}
            for token in self.store.tokens():
                if token.confirmed:
                    self._groups.setdefault(token.group, []).append(token)
        return self._groups.get(group, [])

    def drop(self, session: Session, row: Reservation, reason: str) -> None:
        """Delete ``row``, unbinding a job still waiting for it, and forget its mirror."""
        job = session.get(JobRow, row.owner_job_id) if row.owner_job_id else None
        if job is not None and not job.state.terminal and job.start_time is None:
            unbind(session, row, reason, self.now)
        log.info("rm %s: grid reservation %s dropped: %s", self.rm, row.name, reason)
        if self.store is not None and not self.blind:
            release_tokens_of(self.store, row)
        session.delete(row)
        if row in self.rows:
            self.rows.remove(row)

    def veto(self, session: Session, started: Iterable[Any]) -> set[str]:
        """Job ids (core ``Start.job_id``) of ``started`` that must not start now."""
        started = list(started)
        if not started:
            return set()
        lock_rm(session, self.rm)
        newest = session.scalar(_NEWEST, {"rm": self.rm}) or 0
        if newest > self.last_id:
            raise ConcurrentUpdateError(f"rm {self.rm}: a grid reservation was made while the "
                                        "iteration decided; deciding again")
        if not newest:
            return set()  # no grid reservation on this RM: no job is bound
        ids = [int(s.job_id) for s in started]
        fresh = session.scalars(select(Reservation).where(
            Reservation.rm == self.rm, Reservation.kind == ReservationKind.GRID,
            Reservation.owner_job_id.in_(ids)).execution_options(populate_existing=True))
        bound = {str(r.owner_job_id): r for r in fresh}
        vetoed: set[str] = set()
        for start in started:
            row = bound.get(str(start.job_id))
            if row is None:
                continue
            verdict = self.state(row)
            if verdict == OK:
                continue
            vetoed.add(str(start.job_id))
            if verdict == GONE:
                self.drop(session, row, f"its token {row.token} is expired or released: not "
                                        "started, rescheduled without it")
        return vetoed


# Built once (every iteration asks): the cache key of a statement object is memoized.
_GRID_ROWS = select(Reservation).where(
    Reservation.rm == bindparam("rm"), Reservation.kind == ReservationKind.GRID) \
    .order_by(Reservation.id)
_NEWEST = select(func.max(Reservation.id)).where(
    Reservation.rm == bindparam("rm"), Reservation.kind == ReservationKind.GRID)


def prepare(session: Session, rm: str, now: float, client: Any) -> GridGuard:
    """Restore the token store if it was lost, prune ``rm``'s stale grid reservations,
    and return the guard whose :meth:`GridGuard.veto` checks starts."""
    guard = GridGuard(rm, now, None)
    try:  # first: the restore detaches the rows it read
        guard.store = token_store(client)
        guard.blind = not ensure_restored(guard.store, session, now)
    except Exception as exc:  # noqa: BLE001 - Redis trouble must not stop scheduling
        log.warning("rm %s: token store unusable, grid reservations kept as they are: %s",
                    rm, exc)
        guard.blind = True
    rows = guard.rows = list(session.scalars(_GRID_ROWS, {"rm": rm}))
    guard.last_id = max((r.id for r in rows), default=0)
    if rows:
        _prune(session, guard)
        _forget(session, guard.rows)
    return guard


def _prune(session: Session, guard: GridGuard) -> None:
    at = from_epoch(guard.now)
    young = at - timedelta(seconds=PRUNE_AFTER_S)
    for row in list(guard.rows):
        job = session.get(JobRow, row.owner_job_id) if row.owner_job_id else None
        if as_utc(row.end_time) <= at:
            guard.drop(session, row, "the reservation is over")
        elif job is not None and job.state.terminal:
            guard.drop(session, row, f"its job {job.id} finished")
        elif as_utc(row.created_at) < young and (job is None or job.start_time is None) \
                and guard.state(row) == GONE:
            guard.drop(session, row, f"its token {row.token} was never confirmed or was "
                                     "released (half-made reservation)")
    session.flush()
