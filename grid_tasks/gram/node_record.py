"""A node's registration in SQL, written by its RM's gatekeeper (never by the node).

Liveness stays in Redis (the node's heartbeats); this is the durable trace:
``registered_at``, ``last_seen`` and the resources the node reported.  A node daemon
sends ``record_node`` at start (:mod:`grid_tasks.gram.report_tasks`); the gatekeeper
records it here, waiting while the database is not prepared yet, as under
``grid-tasks up``, where daemons may start before the database is migrated.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone
from typing import Any

from grid_tasks.errors import NotFoundError
from grid_tasks.settings import Settings

log = logging.getLogger(__name__)


def record_in_db(settings: Settings, rm: str, node: str, resources: dict[str, Any],
                 when: datetime | None = None) -> bool:
    """Record the registration in SQL when the db package offers it (at ``when``, else
    now).  The node must already be in the database (``grid-tasks up`` / ``db`` sync
    the topology); returns False when there is no db package."""
    try:
        from grid_tasks import db
    except ImportError:
        return False

    factory = db.session_factory(db.get_engine(settings.database_url))
    with db.session_scope(factory) as session:
        db.record_node_seen(session, rm, node, resources, when or datetime.now(timezone.utc))
    return True


#: Seconds before each retry of the first SQL record while the database is not ready
#: (not migrated, or the node not synced from the topology yet).  About 30 s in all.
RECORD_RETRY_DELAYS = (0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 5.0, 5.0, 5.0, 8.0)


def record_when_ready(settings: Settings, rm: str, node: str, resources: dict[str, Any],
                      delays: tuple[float, ...] = RECORD_RETRY_DELAYS,
                      when: datetime | None = None) -> bool:
    """:func:`record_in_db`, retried while the database is not ready for it."""
    for delay in (*delays, None):
        try:
            return record_in_db(settings, rm, node, resources, when)
        except Exception as exc:
            if delay is None or not _not_ready(exc):
                raise
            log.info("node %s/%s: database not ready (%s); recording again in %g s", rm, node,
                     (str(exc).strip() or type(exc).__name__).splitlines()[0], delay)
            time.sleep(delay)
    return False


def _not_ready(exc: BaseException) -> bool:
    """A missing table (not migrated yet), node row (not synced yet) or connection."""
    from sqlalchemy.exc import OperationalError

    return isinstance(exc, (OperationalError, NotFoundError))
