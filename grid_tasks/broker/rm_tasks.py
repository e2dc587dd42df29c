"""The metascheduler protocol as Celery tasks on each RM's scheduler (seed 002, 3.3).

Thin, idempotent tasks passing names and numbers; the logic is in
:mod:`grid_tasks.scheduling.rm_service`.
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
* ``release`` -> True if a reservation was deleted.

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

from grid_tasks.broker.remote import ESTIMATE, MARK_ENACTED, RELEASE, RESERVE, RESTORE_TOKENS
from grid_tasks.db import session_scope
from grid_tasks.effects import trigger_iteration
from grid_tasks.errors import GridTasksError
from grid_tasks.legion.refusals import ReservationRefused
from grid_tasks.node.registry import NodeRegistry
from grid_tasks.scheduling import rm_service
from grid_tasks.scheduling.grid_reservations import ensure_restored, mirror_ids, token_store
from grid_tasks.services import Services, services_for

log = logging.getLogger(__name__)



def _context(app: Any) -> tuple[Services, NodeRegistry]:
    """The worker's Services, and the node registry on its Redis."""
    services = services_for(app)
    return services, NodeRegistry(services.redis, services.settings.heartbeat_ttl)


def _forget_mirror(services: Services, row: Any) -> None:
    """Release the claims a token-store restore mirrored for ``row`` (if any): a stale
    mirror would only make brokers' token requests fail, so errors are just logged."""
    try:
        token_store(services.redis).release(mirror_ids(row))
    except GridTasksError as exc:
        log.warning("mirror of %s/%s not released: %s", row.rm, row.name, exc)


@shared_task(name=ESTIMATE, bind=True)
def estimate(self: Any, *, rm: str, procs: int, duration: float, not_before: float,
             limit: int = 3, requester: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """When ``rm`` could hold ``procs`` processors for ``duration`` s, from ``not_before``."""
    services, registry = _context(self.app)
    with session_scope(services.sessions) as session:
        return rm_service.estimate(session, rm, procs=procs, duration=duration,
                                   not_before=not_before, now=services.clock.time(),
                                   limit=limit,
                                   requester=requester, registry=registry)


@shared_task(name=RESERVE, bind=True, throws=(ReservationRefused,))
def reserve(self: Any, *, rm: str, name: str, allocation: dict[str, int], start: float,
            duration: float, token: str, job_key: str, label: str | None = None,
            allow_early: bool = False, requester: dict[str, Any] | None = None) -> dict[str, Any]:
    """Hold ``allocation`` on ``rm`` over ``[start, start + duration)`` for one grid job."""
    services, registry = _context(self.app)
    with session_scope(services.sessions) as session:
        made = rm_service.reserve(session, rm, name=name, allocation=allocation, start=start,
                                  duration=duration, token=token, job_key=job_key,
                                  now=services.clock.time(), label=label,
                                  allow_early=allow_early, requester=requester,
                                  registry=registry)
    trigger_iteration(self.app, rm, client=services.redis)
    return made


@shared_task(name=RELEASE, bind=True, throws=(ReservationRefused,))
def release(self: Any, *, rm: str, name: str, token: str | None = None) -> bool:
    """Delete grid reservation ``name`` of ``rm`` (only if it holds ``token``, when given)."""
    services = services_for(self.app)
    with session_scope(services.sessions) as session:
        deleted = rm_service.release(session, rm, name=name, token=token,
                                     now=services.clock.time(),
                                     forget=lambda row: _forget_mirror(services, row))
    if deleted:
        trigger_iteration(self.app, rm, client=services.redis)
    return deleted


@shared_task(name=MARK_ENACTED, bind=True)
def mark_enacted(self: Any, *, rm: str, parts: list[list[str]]) -> int:
    """A broker confirmed these grid reservations' tokens: mark ``parts`` (name, token)
    of ``rm`` enacted in SQL; how many are marked now."""
    services = services_for(self.app)
    with session_scope(services.sessions) as session:
        return rm_service.mark_enacted(session, [(rm, str(name), str(token))
                                                 for name, token in parts])


@shared_task(name=RESTORE_TOKENS, bind=True)
def restore_tokens(self: Any, *, rm: str) -> bool:
    """Restore the grid's token store from SQL if it lost its state (a broker about to
    enact asks first); False while another process restores it."""
    services = services_for(self.app)
    with session_scope(services.sessions) as session:
        return ensure_restored(token_store(services.redis), session, services.clock.time())
