"""Administrative reservations at the RM's gatekeeper: ``setres`` and ``releaseres``.

Maui lets only its administrators reserve or release; here that is whoever signs with
an operator (or scheduler) key (:data:`~grid_tasks.security.roles.TASK_ROLES`).  The
command parses its times and host expression where it runs, then asks the RM's
gatekeeper, which checks the request against the RM's scheduler, stores it and wakes
the RM's iteration.  Answers travel as data (:mod:`grid_tasks.gram.door`).  (Not in ``grid_tasks.ops``, whose
package loads SQLAlchemy: every worker imports every task module at start.)
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from celery import shared_task

from grid_tasks.gram.door import answer

SET_RESERVATION = "grid_tasks.reservation_tasks.set_reservation"
RELEASE_RESERVATIONS = "grid_tasks.reservation_tasks.release_reservations"


@shared_task(name=SET_RESERVATION, bind=True, track_started=False)
def set_reservation_task(self: Any, *, rm: str, hosts: str, resources: str | None,
                         start: str, end: str | None, acl: dict[str, list[str]],
                         name: str | None = None) -> dict[str, Any]:
    """setres at ``rm``'s gatekeeper: the stored reservation as ``showres`` shows it."""
    # (imported here: every worker, node daemons too, imports task modules at start)
    from grid_tasks.db import repository, session_scope
    from grid_tasks.ops.reservations import parse_resources, set_reservation, show_reservations
    from grid_tasks.ops.shell import OpsShell
    from grid_tasks.services import grid_for

    grid = grid_for(self.app)

    def store() -> dict[str, Any]:
        now = datetime.now(timezone.utc)
        with session_scope(grid.sessions) as session:
            nodes = [n.name for n in repository.list_nodes(session, rm)]
            request = parse_resources(hosts, resources, nodes)
            row = set_reservation(
                session, rm, request, start=datetime.fromisoformat(start),
                end=datetime.fromisoformat(end) if end else None, acl=acl, now=now,
                name=name, registry=OpsShell(grid.settings).registry())  # None: Redis away
            shown = next(r for r in show_reservations(session, now, rm) if r.name == row.name)
            data = shown.to_dict(now)
        return {**data, "iteration_triggered": _wake(grid, rm)}

    return answer(store)


@shared_task(name=RELEASE_RESERVATIONS, bind=True, track_started=False)
def release_reservations_task(self: Any, *, rm: str, names: list[str]) -> dict[str, Any]:
    """releaseres at ``rm``'s gatekeeper: every name checked first, one unknown releases none."""
    from grid_tasks.db import session_scope
    from grid_tasks.ops.reservations import release_reservations
    from grid_tasks.services import grid_for

    grid = grid_for(self.app)

    def release() -> dict[str, Any]:
        with session_scope(grid.sessions) as session:
            released = [r.name for r in release_reservations(session, names, rm)]
        return {"released": released, "rm": rm, "iteration_triggered": _wake(grid, rm)}

    return answer(release)


def _wake(grid: Any, rm: str) -> bool:
    """Trigger ``rm``'s iteration; False (and no error) when that cannot be done now."""
    from grid_tasks.scheduling import trigger_iteration

    try:
        trigger_iteration(grid.app, rm, client=grid.redis)
    except Exception:  # the broker or Redis away: beat's next iteration catches up
        return False
    return True
