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

from sqlalchemy.exc import OperationalError

from grid_tasks.db import record_node_seen, session_scope
from grid_tasks.errors import NotFoundError, StorageUnavailable

log = logging.getLogger(__name__)


def record_in_db(sessions: Any, rm: str, node: str, resources: dict[str, Any],
                 when: datetime | None = None) -> bool:
    """Record the registration in SQL (at ``when``, else now).  The node must already
    be in the database (``grid-tasks up`` / ``db`` sync the topology)."""
    with session_scope(sessions) as session:
        record_node_seen(session, rm, node, resources, when or datetime.now(timezone.utc))
    return True


#: Seconds before each retry of the first SQL record while the database is not ready
#: (not migrated, or the node not synced from the topology yet).  About 30 s in all.
RECORD_RETRY_DELAYS = (0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 5.0, 5.0, 5.0, 8.0)


def record_when_ready(sessions: Any, rm: str, node: str, resources: dict[str, Any],
                      delays: tuple[float, ...] = RECORD_RETRY_DELAYS,
                      when: datetime | None = None) -> bool:
    """:func:`record_in_db`, retried while the database is not ready for it."""
    for delay in (*delays, None):
        try:
            return record_in_db(sessions, rm, node, resources, when)
        except Exception as exc:
            if delay is None or not _not_ready(exc):
                raise
            log.info("node %s/%s: database not ready (%s); recording again in %g s", rm, node,
                     (str(exc).strip() or type(exc).__name__).splitlines()[0], delay)
            time.sleep(delay)
    return False


def _not_ready(exc: BaseException) -> bool:
    """A missing table (not migrated yet), node row (not synced yet) or connection."""
    return isinstance(exc, (OperationalError, StorageUnavailable, NotFoundError))
