"""The live broker: place a request, estimate on every RM, co-reserve with one common start.

Seed 000's scheduler and enactor over seed 002's protocol::

    broker = Broker(app, TokenStore.from_url(url), lambda: Collection.live_from_settings(s))
    co = broker.coreserve(broker.components(rsl, requester), now=time.time())

1. **Placement** (:mod:`.placement`): each component gets the RMs that may hold it
   (its own ``resourceManagerContact``, else the collection's RMs accepting the
   requester and matching its ``requirements``).
2. **Estimates** (:mod:`.estimates`, :mod:`.remote`): every candidate RM's ``estimate``
   task, sent all at once with one timeout (an RM that does not answer is left out,
   with a warning); :func:`~grid_tasks.broker.planner.plan` then orders candidate
   schedules with one common start, at or after ``now + lead``.
3. **Enactment** (:mod:`.enactor`): tokens for a whole schedule in one atomic script;
   the confirm hook calls ``reserve`` on every RM of the schedule in parallel, bound
   to the placement's token; a refusal vetoes the schedule and the next one is taken
   as a difference set (unchanged placements keep their tokens *and* their grid
   reservations); on success the tokens are confirmed under the job key, and then the
   grid reservations are marked enacted in SQL (one transaction,
   :func:`~.rm_service.mark_enacted`): a broker killed between the RMs' ``reserve`` and
   this point leaves rows that a token store restored after a Redis loss never revives,
   so the RMs prune them.  When every
   candidate is refused, every token and grid reservation taken is released and
   :class:`~.coreservation.CoReservationRefused` says why (after asking the RMs again
   once, ``rounds``: another broker may have taken a slot between estimate and reserve).

Connections are passed in (Celery app, token store, collection source); ``now`` is an
argument of every public call, the only clock the planning uses.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from grid_tasks.broker.coreservation import (CoReservation, CoReservationRefused,
                                             CoReservationUnrecorded, ReservedPart)
from grid_tasks.broker.enactment import RemoteEnactment, Unrecorded
from grid_tasks.broker.enactor import Enactor, EnactmentRefused
from grid_tasks.broker.estimates import Estimates, Fetcher, whole_second
from grid_tasks.broker.holds import RmHolds
from grid_tasks.broker.placement import Component, PlacementError, components
from grid_tasks.broker.planner import Placement, Schedule, plan
from grid_tasks.broker.remote import DEFAULT_TIMEOUT_S, RemoteRMs, requester_dict
from grid_tasks.legion.collection import Collection, Requester
from grid_tasks.legion.tokens import TokenStore
from grid_tasks.limits import DEFAULT_MAX_SUBSTITUTION
from grid_tasks.rsl import lower

__all__ = ["Broker", "Planned", "new_job_key"]

log = logging.getLogger(__name__)

#: Seconds between "now" and the earliest common start the broker offers: the
#: reservations must be made, and the subjobs submitted, before it.
DEFAULT_LEAD_S = 3.0


def new_job_key(prefix: str = "co") -> str:
    """A fresh job key (the tokens' group and the reservations' name stem)."""
    return f"{prefix}-{secrets.token_hex(5)}"


@dataclass(frozen=True)
class Planned:
    """Candidate schedules (best first) for ``components``, with the planner's warnings."""

    components: tuple[Component, ...]
    schedules: tuple[Schedule, ...]
    not_before: float
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        labels = [c.label for c in self.components]
        return {"not_before": self.not_before, "warnings": list(self.warnings),
                "components": [c.to_dict() for c in self.components],
                "schedules": [{"start": s.start, "end": s.end, "placements": [
                    {"label": labels[p.subjob], "rm": p.rm, "start": p.start,
                     "duration": p.duration, "allocation": dict(p.nodes)}
                    for p in s.placements]} for s in self.schedules]}


class Broker:
    """Places, plans and co-reserves requests over live RMs (see the module docstring)."""

    def __init__(self, app: Any, store: TokenStore,
                 collection: Collection | Callable[[], Collection], *,
                 timeout: float = DEFAULT_TIMEOUT_S, policy: str = "earliest",
                 limit: int = 8, lead: float = DEFAULT_LEAD_S, ttl: float | None = None,
                 fetch: Fetcher | None = None, rounds: int = 2,
                 enactment: Unrecorded | None = None) -> None:
        self.app, self.store = app, store
        self._collection = collection
        self.remote = RemoteRMs(app, timeout=timeout)
        # who marks a confirmed co-reservation enacted (:mod:`.enactment`); by default
        # nobody (a broker without a grid's database behind it)
        self.enactment = enactment or Unrecorded()
        #: longest text an RSL substitution may make (the grid's setting, or the default)
        self.max_substitution = DEFAULT_MAX_SUBSTITUTION
        self.policy, self.limit, self.lead, self.ttl = policy, int(limit), float(lead), ttl
        self.rounds = int(rounds)
        self._fetch = fetch

    @classmethod
    def for_settings(cls, settings: Any, app: Any, **options: Any) -> "Broker":
        """A broker on the grid of ``settings``: its Redis token store, live collection;
        its enactments recorded by the RMs (no database needed here)."""
        store = TokenStore.from_url(settings.redis_url, settings=settings)
        broker = cls(app, store, lambda: Collection.live_from_settings(settings), **options)
        broker.enactment = RemoteEnactment(broker.remote)
        broker.max_substitution = settings.rsl_max_substitution
        return broker

    def close(self) -> None:
        """Close the token store's Redis connections."""
        self.store.client.close()

    def __enter__(self) -> "Broker":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def collection(self) -> Collection:
        """The collection now (read afresh when the source is a callable)."""
        source = self._collection
        return source() if callable(source) else source

    # -- 1. placement -------------------------------------------------------------------
    def components(self, request: Any, requester: Requester | None = None, *,
                   variables: dict[str, str] | None = None,
                   source: str = "<rsl>") -> list[Component]:
        """Lower an RSL request (or take lowered subjobs) into placeable components."""
        if isinstance(request, (str, bytes)):
            subs = lower(request, variables, source=source,
                         max_substitution=self.max_substitution)
        else:
            subs = list(request)
        return components(subs, self.collection(), requester)

    # -- 2. estimates and plan -----------------------------------------------------------
    def fetcher(self, requester: Requester | None, group: str | None = None,
                account: str | None = None) -> Fetcher:
        """The batch estimate fetcher: the injected one, else the RMs' estimate tasks."""
        if self._fetch is not None:
            return self._fetch
        who = requester_dict(requester, group, account)

        def fetch(asks: Sequence[tuple[str, int, float, float]]) -> list[Any]:
            return [o.value if o.ok else (None if o.timed_out else _never(rm, o))
                    for (rm, *_), o in zip(asks, self.remote.estimate(asks, requester=who))]

        return fetch

    def plan(self, comps: Sequence[Component], *, now: float,
             requester: Requester | None = None, not_before: float | None = None,
             limit: int | None = None, group: str | None = None) -> Planned:
        """Candidate schedules with one common start at or after ``not_before``
        (default ``now + lead``, rounded up to a whole second); PlacementError when some
        component can never start."""
        t0 = whole_second(max(float(now), float(now) + self.lead if not_before is None
                              else not_before))
        rms = list(dict.fromkeys(rm for c in comps for rm in c.candidates))
        est = Estimates(self.fetcher(requester, group))
        est.prefetch((rm, c.procs, c.duration, t0) for c in comps for rm in c.candidates)
        for comp in comps:
            _check_some_rm(comp, est, t0)
        found = plan([c.need() for c in comps], est.estimators(rms), t0,
                     policy=self.policy, limit=limit or self.limit)
        if not found:
            raise PlacementError(
                f"no common start for {', '.join(c.label for c in comps)}: every "
                "combination of their resource managers has some member that can never "
                "start its part" + "".join(f"; {w}" for w in est.warnings))
        return Planned(tuple(comps), tuple(found), t0, tuple(est.warnings))

    # -- 3. co-reservation -----------------------------------------------------------------
    def coreserve(self, comps: Sequence[Component], *, now: float, job_key: str | None = None,
                  requester: Requester | None = None, allow_early: bool = False,
                  not_before: float | None = None, group: str | None = None,
                  planned: Planned | None = None) -> CoReservation:
        """Plan (unless ``planned`` is given) and reserve the first schedule every RM
        accepts; CoReservationRefused (nothing left held) when none can be.

        When every candidate was refused (another broker took a slot between estimate
        and reserve), the RMs are asked again and the new candidates tried, up to
        ``rounds`` plans in all (one when ``planned`` is given)."""
        job_key = job_key or new_job_key()
        tried: list[dict[str, Any]] = []
        warnings: tuple[str, ...] = ()
        for round_ in range(1 if planned is not None else max(1, self.rounds)):
            plan_now = planned or self.plan(comps, now=now, requester=requester,
                                            not_before=not_before, group=group)
            try:
                return self._enact(plan_now, job_key, requester, allow_early, group, now)
            except CoReservationRefused as refused:
                tried += [{**a, "round": round_} for a in refused.attempts]
                warnings = plan_now.warnings
        raise CoReservationRefused(job_key, tried, warnings)

    def _enact(self, planned: Planned, job_key: str, requester: Requester | None,
               allow_early: bool, group: str | None, now: float) -> CoReservation:
        """One walk of the enactor over ``planned``'s candidates."""
        self._ensure_capacities(planned.schedules, now)
        enactor = _TrackingEnactor(self.store, owner=f"broker-{job_key}", ttl=self.ttl)
        holds = RmHolds(self.remote, enactor, job_key, [c.label for c in planned.components],
                        allow_early, requester_dict(requester, group))
        try:
            done = enactor.enact(planned.schedules, job_key, holds.confirm, undo_fn=holds.undo)
        except EnactmentRefused as exc:
            holds.release_all()
            raise CoReservationRefused(job_key, holds.describe(exc.attempts),
                                       planned.warnings) from None
        except BaseException:
            holds.release_all()
            raise
        holds.release_except(done.schedule)
        parts = holds.parts(done.schedule)
        self._record(job_key, parts, holds)
        return CoReservation(job_key, done.schedule.start, parts,
                             tuple(holds.describe(done.attempts)), planned.warnings)

    def _record(self, job_key: str, parts: Sequence[ReservedPart], holds: RmHolds) -> None:
        """Mark ``parts`` enacted in SQL, after their tokens were confirmed (never before:
        a mark on rows whose tokens die unconfirmed would revive them after a Redis loss).
        On failure everything is released: an unmarked part would be lost, and pruned,
        at the next Redis restart."""
        try:
            marked = self.enactment.mark(parts)
            reason = "" if marked == len(parts) else \
                f"{len(parts) - marked} of {len(parts)} grid reservations are gone"
        except Exception as exc:  # noqa: BLE001 - any failure: undo, then say why
            reason = f"{type(exc).__name__}: {exc}"
        if reason:
            holds.release_all()
            self.release_tokens(job_key)
            raise CoReservationUnrecorded(job_key, reason)

    def release(self, co: CoReservation) -> int:
        """Release every part of ``co`` on its RM and its tokens; how many parts were held."""
        outcomes = self.remote.release([{"rm": p.rm, "name": p.name, "token": p.token}
                                        for p in co.parts])
        self.release_tokens(co.job_key)
        return sum(1 for o in outcomes if o.ok and o.value)

    def sweep(self, now: float) -> int:
        """Release confirmed tokens whose interval ended before ``now``: they constrain
        nothing any more, and nobody else removes them (a co-reserved job's tokens
        outlive it).  Returns how many."""
        ended = [t for t in self.store.tokens() if t.confirmed and t.end <= now]
        return self.store.release(ended) if ended else 0

    def release_tokens(self, job_key: str) -> int:
        """Release the confirmed tokens of ``job_key`` (its group in the token store)."""
        return self.store.release([t for t in self.store.tokens() if t.group == job_key])

    def _ensure_capacities(self, schedules: Sequence[Schedule], now: float) -> None:
        """Register the capacity of every node a schedule claims that the store lacks
        (a fresh token store); existing capacities are left as they are.

        A store that lost its state is first restored from SQL (the durable
        reservations mirrored back; :mod:`.enactment`): capacities alone would let
        this broker take tokens over reservations the store no longer shows."""
        self.enactment.restore(self.store, now, sorted({p.rm for s in schedules
                                                        for p in s.placements}))
        wanted = {f"{p.rm}/{n}" for s in schedules for p in s.placements for n, _ in p.nodes}
        have = self.store.capacities()
        missing = wanted - set(have)
        if missing:
            caps = self.collection().capacities()
            unknown = sorted({k.split("/", 1)[0] for k in missing if k not in caps})
            if unknown:  # e.g. a Slurm partition: only its RM knows how big it is
                caps = {**self.remote.capacities(unknown), **caps}
            self.store.set_capacities({k: caps[k] for k in missing if k in caps})


def _never(rm: str, outcome: Any) -> list[Any]:
    log.warning("estimate on %s refused: %s", rm, outcome.reason())
    return []


def _check_some_rm(comp: Component, est: Estimates, t0: float) -> None:
    """PlacementError when no candidate RM of ``comp`` can ever start it."""
    verdicts = {rm: est.verdict(rm, comp.procs, comp.duration, t0) for rm in comp.candidates}
    if all(v in ("never", "no answer") for v in verdicts.values()):
        why = ", ".join(f"{rm}: {v}" for rm, v in verdicts.items())
        raise PlacementError(f"component {comp.label!r} ({comp.procs} processors for "
                             f"{comp.duration:g} s): no resource manager can ever hold it "
                             f"({why})", label=comp.label)


class _TrackingEnactor(Enactor):
    """An Enactor whose confirm hook can see the tokens held per placement."""

    held: Any = None

    def _hold(self, held: Any, schedule: Schedule, keep: Sequence[Placement],  # type: ignore[override]
              acquire: Sequence[Placement], claims: Any, new: Any) -> None:
        Enactor._hold(held, schedule, keep, acquire, claims, new)
        self.held = held

    def token_of(self, placement: Placement) -> str:
        """The id of the first token held for ``placement`` (the one its RM checks)."""
        return self.held.by_placement[placement][0].id

