"""The metascheduler protocol as Celery tasks on each RM's scheduler (seed 002, 3.3).

Thin, idempotent tasks passing names and numbers; each asks the RM's implementation
of the one RM interface (:mod:`grid_tasks.scheduling.rm_backend`), chosen from the
topology's ``kind`` (:func:`grid_tasks.scheduling.rm_kinds.backend_for`): the native
Maui RM, or a Slurm cluster.  The module sits with the RM side in ``scheduling``;
the tasks keep their names ``grid_tasks.scheduling.rm_tasks.*`` (the protocol's names on
the wire, :mod:`grid_tasks.broker.remote`), so brokers and workers of either side of
the move still understand each other.
They run on the ``scheduler`` queue, where the RMs' iterations run (routed by
``grid_tasks.*`` in :data:`grid_tasks.celery_app.TASK_ROUTES`).  Call them by name::

    app.send_task(ESTIMATE, kwargs={"rm": "rmA", "procs": 4, "duration": 600.0,
                                    "not_before": time.time()}, **readable(...))

* ``estimate`` -> ``[{"time": epoch, "allocation": {node: procs}}, ...]``, earliest
  first, every start at or after ``not_before``; ``[]`` means never;
* ``reserve`` -> ``{"rm", "name", "id", "start", "end", "allocation"}``, or raises
  :class:`~grid_tasks.legion.refusals.ReservationRefused` (it round-trips through the
  JSON result backend: ``AsyncResult.get()`` raises it in the caller, whose process
  must have imported :mod:`grid_tasks.legion.refusals`, as every worker has);
* ``release`` -> True if a reservation was deleted (a Slurm one in use: as soon as
  its job ends);
* ``capacities`` -> ``{node: procs}``, what the broker's token store needs for claims
  on nodes the collection does not know (a Slurm partition);
* ``prune`` -> names of reservations a Slurm RM deleted late (beat runs it per RM).

``token`` is the broker's reservation token for the placement: the id of a token in the
:class:`~grid_tasks.legion.tokens.TokenStore` on ``settings.redis_url`` (e.g. the
first token the enactor took for the placement's claims), or the job key its confirmed
tokens are bound to.  When the bound job is about to start, the RM checks it there
(:mod:`grid_tasks.scheduling.grid_reservations`): expired or released, nothing starts
and the reservation is dropped.  ``reserve`` and ``release`` trigger the RM's iteration.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from celery.signals import beat_init

from grid_tasks.broker.remote import (CAPACITIES, ESTIMATE, MARK_ENACTED, PRUNE, RELEASE,
                                      RESERVE, RESTORE_TOKENS)
from grid_tasks.celery_app import HOUSEKEEPING, readable
from grid_tasks.db import session_scope
from grid_tasks.effects import trigger_iteration
from grid_tasks.errors import GridTasksError
from grid_tasks.gram.jmvars import mapped_account
from grid_tasks.legion.refusals import ReservationRefused
from grid_tasks.node.registry import NodeRegistry
from grid_tasks.scheduling.grid_reservations import (ensure_restored, mirror_ids,
                                                     release_tokens_of, token_store)
from grid_tasks.scheduling.rm_backend import RMBackend
from grid_tasks.scheduling.rm_kinds import backend_for, topology_of
from grid_tasks.services import Services, services_for
from grid_tasks.settings import app_settings
from grid_tasks.topology import RMKind

log = logging.getLogger(__name__)

#: Seconds between prunes of a Slurm RM's late releases (a reservation whose job ended).
PRUNE_EVERY_S = 10.0


def _backend(app: Any, rm: str) -> tuple[Services, RMBackend]:
    """The worker's Services, and ``rm``'s implementation of the RM interface (with the
    node registry on the worker's Redis, for a native RM)."""
    services = services_for(app)
    registry = NodeRegistry(services.redis, services.settings.heartbeat_ttl)
    topology = topology_of(services.settings.topology_file)
    return services, backend_for(rm, topology, registry=registry)


def _forget_mirror(services: Services, row: Any) -> None:
    """Release the claims a token-store restore mirrored for ``row`` (if any): a stale
    mirror would only make brokers' token requests fail, so errors are just logged."""
    try:
        token_store(services.redis).release(mirror_ids(row))
    except GridTasksError as exc:
        log.warning("mirror of %s/%s not released: %s", row.rm, row.name, exc)


@shared_task(name=ESTIMATE, bind=True, throws=(ReservationRefused,))
def estimate(self: Any, *, rm: str, procs: int, duration: float, not_before: float,
             limit: int = 3, requester: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """When ``rm`` could hold ``procs`` processors for ``duration`` s, from ``not_before``."""
    services, backend = _backend(self.app, rm)
    with session_scope(services.sessions) as session:
        return backend.estimate(session, procs=procs, duration=duration,
                                not_before=not_before, now=services.clock.time(),
                                limit=limit, requester=requester)


@shared_task(name=RESERVE, bind=True, throws=(ReservationRefused,))
def reserve(self: Any, *, rm: str, name: str, allocation: dict[str, int], start: float,
            duration: float, token: str, job_key: str, label: str | None = None,
            allow_early: bool = False, requester: dict[str, Any] | None = None) -> dict[str, Any]:
    """Hold ``allocation`` on ``rm`` over ``[start, start + duration)`` for one grid job,
    for the local account the grid map gives the submitter (the worker's own without one)."""
    services, backend = _backend(self.app, rm)
    wanted = (requester or {}).get("user")
    account = mapped_account(services.settings, self.submitter(), rm, wanted)
    with session_scope(services.sessions) as session:
        made = backend.reserve(session, name=name, allocation=allocation, start=start,
                               duration=duration, token=token, job_key=job_key,
                               now=services.clock.time(), label=label,
                               allow_early=allow_early, requester=requester,
                               account=account)
    trigger_iteration(self.app, rm, client=services.redis)
    return made


@shared_task(name=RELEASE, bind=True, throws=(ReservationRefused,))
def release(self: Any, *, rm: str, name: str, token: str | None = None) -> bool:
    """Delete grid reservation ``name`` of ``rm`` (only if it holds ``token``, when given)."""
    services, backend = _backend(self.app, rm)
    with session_scope(services.sessions) as session:
        deleted = backend.release(session, name=name, token=token, now=services.clock.time(),
                                  forget=lambda row: _forget_mirror(services, row))
    if deleted:
        trigger_iteration(self.app, rm, client=services.redis)
    return deleted


@shared_task(name=MARK_ENACTED, bind=True)
def mark_enacted(self: Any, *, rm: str, parts: list[list[str]]) -> int:
    """A broker confirmed these grid reservations' tokens: mark ``parts`` (name, token)
    of ``rm`` enacted in SQL; how many are marked now."""
    services, backend = _backend(self.app, rm)
    with session_scope(services.sessions) as session:
        return backend.mark_enacted(session, [(str(name), str(token)) for name, token in parts])


@shared_task(name=RESTORE_TOKENS, bind=True)
def restore_tokens(self: Any, *, rm: str) -> bool:
    """Restore the grid's token store from SQL if it lost its state (a broker about to
    enact asks first); False while another process restores it."""
    services = services_for(self.app)
    with session_scope(services.sessions) as session:
        return ensure_restored(token_store(services.redis), session, services.clock.time())


@shared_task(name=CAPACITIES, bind=True, throws=(ReservationRefused,))
def capacities(self: Any, *, rm: str) -> dict[str, int]:
    """Processors per allocation key of ``rm`` (its nodes, or a Slurm partition)."""
    services, backend = _backend(self.app, rm)
    with session_scope(services.sessions) as session:
        return backend.capacities(session)


@shared_task(name=PRUNE, bind=True, ignore_result=True, **HOUSEKEEPING)
def prune(self: Any, *, rm: str) -> list[str]:
    """Delete the reservations ``rm`` could not delete at once (a Slurm reservation whose
    job still ran, slurmctld down), those nothing holds any more and those whose job
    ended, releasing their tokens (beat runs it; a Slurm RM's follower sends it as soon
    as a job bound to a grid reservation ends)."""
    services, backend = _backend(self.app, rm)
    store = token_store(services.redis)
    known: list[set[str] | None] = []

    def held(row: Any) -> bool:
        """Whether the store still knows ``row``'s token (read once, on first use; an
        unreadable store prunes nothing for its tokens)."""
        if not known:
            try:
                tokens, _ = store.snapshot()
                known.append({t.id for t in tokens} | {t.group for t in tokens if t.confirmed})
            except GridTasksError as exc:
                log.warning("token store unreadable, no grid reservation pruned: %s", exc)
                known.append(None)
        return known[0] is None or row.token in known[0]

    with session_scope(services.sessions) as session:
        return backend.prune(session, services.clock.time(), held,
                             forget=lambda row: release_tokens_of(store, row))


def _slurm_prune_schedule(sender: Any = None, **_: Any) -> None:
    """At beat start: :func:`prune` every :data:`PRUNE_EVERY_S` for each Slurm RM (a
    native RM's iteration prunes its own reservations)."""
    topology = topology_of(app_settings(sender.app).topology_file)
    if topology is None:
        return
    sender.scheduler.update_from_dict({
        f"{PRUNE}[{spec.name}]": {
            "task": PRUNE, "schedule": PRUNE_EVERY_S, "kwargs": {"rm": spec.name},
            "options": {**readable("prune", rm=spec.name), "expires": PRUNE_EVERY_S}}
        for spec in topology.of_kind(RMKind.SLURM)})


beat_init.connect(_slurm_prune_schedule, weak=False, dispatch_uid="grid_tasks.scheduling.rm_tasks.prune")
