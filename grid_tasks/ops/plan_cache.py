"""The last plan of an RM, kept for the operator commands while it is fresh.

``showq`` orders the idle queue by the scheduler's priority and ``showstart``/``showbf``
answer on the RM's plan (:func:`~grid_tasks.scheduling.plan.load_plan`).  With a deep
queue, building that plan (reading every idle job, ranking it, one in-memory
iteration) costs seconds, and each command is a new process.  So the outcome of a plan
is kept in Redis (which holds only what may be lost or rebuilt) as a packed
*digest*: every idle job's priority (and submission time, showq's tie-break), the
jobs the iteration would start and where, and the jobs it reserved for.

**Freshness rule.**  A digest is reused only while both hold:

* the RM's durable state is the one it was made from: the :func:`state_mark` of the
  RM (its idle queue's change counter and its other jobs' count, newest id and sum of
  optimistic-lock versions, which together change with every change of a job row;
  its reservations, fences, nodes and accounting records; its maui.cfg path and
  modification time; the database's incarnation; and the nodes the heartbeat
  registry says are not usable: :mod:`grid_tasks.ops.plan_mark`) is unchanged;
* it is at most :data:`MAX_AGE` seconds old (time alone moves priorities and ends
  running jobs; Maui's own showq reports its last iteration, up to RMPOLLINTERVAL,
  60 s by default, old).  ``GRID_TASKS_OPS_PLAN_MAX_AGE`` (seconds) changes it for
  the operator commands; 0 keeps no plan.

A hit rebuilds the plan's scheduler *without* its idle queue (running jobs, holds and
fences from SQL: cheap at any depth) and replays the digest's starts and job
reservations into it, so estimates and free windows see what the full plan saw
(:mod:`grid_tasks.ops.plan_replay`).

**Cost.**  Each operator command is a new process.  This module loads no Maui core: a
``showq`` answered from a fresh digest never imports it; making a plan (a miss) or
replaying one imports :mod:`~grid_tasks.ops.plan_replay` then (start-up time is the
reason for that one import inside a function).  The digest is stored as packed arrays
(:meth:`PlanDigest.to_bytes`): decoding 100,000 priorities from JSON took a quarter
of a second, from arrays a few milliseconds.  Its ranking is kept in showq's order and
stays packed (:class:`~grid_tasks.ops.plan_digest.Ranked`), with the queued jobs that
carry a hold or a dependency (``flagged``: else a pass over the queue's JSON columns
per showq).  Telling a fresh digest (:func:`state_mark`) reads no row of the queue.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError
from sqlalchemy.orm import Session

from grid_tasks.utc import epoch, from_epoch

from . import queue_rows
from .plan_digest import PlanDigest, Ranked
from .plan_mark import state_mark

__all__ = ["MAX_AGE", "MAX_AGE_ENV", "PlanCache", "PlanDigest", "Plans", "Ranked", "made_at",
           "state_mark"]

if TYPE_CHECKING:
    from grid_tasks.scheduling.plan import Plan

log = logging.getLogger(__name__)

#: Seconds a digest stays usable even when nothing changed (see the freshness rule).
MAX_AGE = 60.0
#: Environment variable overriding MAX_AGE for the operator commands.
MAX_AGE_ENV = "GRID_TASKS_OPS_PLAN_MAX_AGE"
#: Redis key of an RM's digest: per database (by a hash of its URL) and RM; "packed2"
#: names the layout (:meth:`PlanDigest.to_bytes`) and the mark it is told fresh by
#: (:mod:`~grid_tasks.ops.plan_mark`), so that an older grid_tasks (JSON digests under
#: the key without it; packed ones under "packed", marked by every job's version) and
#: this one do not evict each other's plans.
KEY = "grid_tasks:ops:plan:packed2:{db}:{rm}"


class PlanCache:
    """Digests of the RMs' last plans in Redis (``client`` None: nothing is kept, every
    plan is made anew).  A Redis fault reads as a miss and skips the store."""

    def __init__(self, client: Any, database_url: str, *, max_age: float = MAX_AGE) -> None:
        self.client = client
        self.max_age = max_age
        self._db = hashlib.sha256(database_url.encode()).hexdigest()[:16]

    def key(self, rm: str) -> str:
        return KEY.format(db=self._db, rm=rm)

    def get(self, rm: str, mark: str, now: float) -> PlanDigest | None:
        """The RM's digest if fresh at ``now`` under ``mark``, else None."""
        if self.client is None:
            return None
        try:
            raw = self.client.get(self.key(rm))
        except (RedisError, OSError) as exc:
            log.debug("plan cache unreadable: %s", exc)
            return None
        if raw is None:
            return None
        try:
            digest = PlanDigest.from_bytes(raw)
        except (ValueError, KeyError, TypeError):
            return None  # an older or damaged entry: make the plan anew
        if digest.mark != mark or not 0 <= now - digest.made <= self.max_age:
            return None
        return digest

    def put(self, digest: PlanDigest) -> None:
        if self.client is None:
            return
        try:
            self.client.set(self.key(digest.rm), digest.to_bytes(),
                            ex=max(1, int(self.max_age + 1)))
        except (RedisError, OSError) as exc:
            log.debug("plan cache not written: %s", exc)


class Plans:
    """Where the operator commands get an RM's plan or priority ranking: from a fresh
    cached digest when there is one, else by making the plan (and caching its digest)."""

    def __init__(self, cache: PlanCache | None = None, registry: Any = None, *,
                 iterate: bool = True) -> None:
        self.cache = cache
        self.registry = registry
        #: without a cache, whether a plan made runs its iteration (only the ranking
        #: wanted: it is computed before the iteration, which costs more at depth)
        self.iterate = iterate or cache is not None
        self.hits = 0  # how many answers came from a cached digest (tests, benchmarks)

    def digest(self, session: Session, rm: str, now: datetime) -> tuple[PlanDigest, Plan | None]:
        """The RM's fresh digest, and the full plan when it had to be made now."""
        mark = state_mark(session, rm, self.registry) if self.cache is not None else ""
        found = self.cache.get(rm, mark, epoch(now)) if self.cache is not None else None
        if found is not None:
            self.hits += 1
            return found, None
        from grid_tasks.ops import plan_replay  # the Maui core: only to make a plan

        plan = plan_replay.load_plan(session, rm, now, registry=self.registry,
                                     iterate=self.iterate, breakdowns=False, scores=True)
        made = plan_replay.digest_of(plan, mark, queue_rows.flagged_ids(session, rm))
        if self.cache is not None:
            self.cache.put(made)
        return made, plan

    def ranking(self, session: Session, rm: str, now: datetime) -> Ranked:
        """The priorities and submission times of ``rm``'s idle jobs, in showq's order."""
        return self.digest(session, rm, now)[0].ranked

    def plan(self, session: Session, rm: str, now: datetime) -> Plan:
        """The RM's plan at ``now``: made anew, or rebuilt from a fresh digest."""
        digest, plan = self.digest(session, rm, now)
        if plan is not None:
            return plan
        from grid_tasks.ops import plan_replay  # the Maui core: only to replay a plan

        return plan_replay.replay(session, digest, now, self.registry)


def made_at(digest: PlanDigest) -> datetime:
    """When the digest's plan was made."""
    return from_epoch(digest.made)
