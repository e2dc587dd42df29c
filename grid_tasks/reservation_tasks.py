"""Administrative reservations at the RM's gatekeeper: ``setres`` and ``releaseres``.

Maui lets only its administrators reserve or release; here that is whoever signs with
an operator (or scheduler) key (:data:`~grid_tasks.security.roles.TASK_ROLES`).  The
command parses its times and host expression where it runs, then asks the RM's
gatekeeper, which checks the request against the RM's scheduler, stores it and wakes
the RM's iteration.  Answers travel as data (:mod:`grid_tasks.gram.door`).  A
gatekeepers' and scheduler's task module: node daemons never import it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from celery import shared_task
from redis.exceptions import RedisError

from grid_tasks.db import repository, session_scope
from grid_tasks.effects import trigger_iteration
from grid_tasks.gram.door import answer
from grid_tasks.node.registry import NodeRegistry
from grid_tasks.ops.reservations import (
    parse_resources, release_reservations, set_reservation, show_reservations,
)
from grid_tasks.services import Services, services_for

SET_RESERVATION = "grid_tasks.reservation_tasks.set_reservation"
RELEASE_RESERVATIONS = "grid_tasks.reservation_tasks.release_reservations"


@shared_task(name=SET_RESERVATION, bind=True, track_started=False)
def set_reservation_task(self: Any, *, rm: str, hosts: str, resources: str | None,
                         start: str, end: str | None, acl: dict[str, list[str]],
                         name: str | None = None) -> dict[str, Any]:
    """setres at ``rm``'s gatekeeper: the stored reservation as ``showres`` shows it."""
    services = services_for(self.app)

    def store() -> dict[str, Any]:
        now = services.clock.now()
        registry = _registry(services)
        with session_scope(services.sessions) as session:
            nodes = [n.name for n in repository.list_nodes(session, rm)]
            request = parse_resources(hosts, resources, nodes)
            row = set_reservation(
                session, rm, request, start=datetime.fromisoformat(start),
                end=datetime.fromisoformat(end) if end else None, acl=acl, now=now,
                name=name, registry=registry)
            shown = next(r for r in show_reservations(session, now, rm) if r.name == row.name)
            data = shown.to_dict(now)
        return {**data, "iteration_triggered": _wake(services, rm)}

    return answer(store)


@shared_task(name=RELEASE_RESERVATIONS, bind=True, track_started=False)
def release_reservations_task(self: Any, *, rm: str, names: list[str]) -> dict[str, Any]:
    """releaseres at ``rm``'s gatekeeper: every name checked first, one unknown releases none."""
    services = services_for(self.app)

    def release() -> dict[str, Any]:
        with session_scope(services.sessions) as session:
            released = [r.name for r in release_reservations(session, names, rm)]
        return {"released": released, "rm": rm, "iteration_triggered": _wake(services, rm)}

    return answer(release)


def _registry(services: Services) -> NodeRegistry | None:
    """The node registry, or None when Redis cannot be reached (the reservation is still
    checked against the RM's nodes as the database knows them)."""
    registry = NodeRegistry(services.redis, services.settings.heartbeat_ttl)
    try:
        registry.client.ping()
    except (RedisError, OSError):
        return None
    return registry


def _wake(services: Services, rm: str) -> bool:
    """Trigger ``rm``'s iteration; False (and no error) when that cannot be done now."""
    try:
        trigger_iteration(services.app, rm, client=services.redis)
    except Exception:  # the broker or Redis away: beat's next iteration catches up
        return False
    return True
