"""Retrying database writes: optimistic-lock conflicts at once, a lost server with backoff.

A gatekeeper recording node reports must ride out a database outage of any length
(the reports wait, durable, in the broker); a write that lost an optimistic-lock race
is simply run again.  Its task retries in place for a few seconds only, with a backoff
capped at :data:`MAX_OUTAGE_DELAY_S` (so a write lands within that long of the
database's return), and then puts its message back on the queue to be tried again:
a worker thread is never held by one outage for long, and the gatekeeper's door
(submissions, cancels) is served between the tries.  Only one thread per process
waits in place at a time (:func:`retrying_one_at_a_time`): with every thread of a
gatekeeper waiting on reports, its door went unanswered for the whole outage.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from sqlalchemy.exc import DBAPIError, OperationalError

from grid_tasks.db.errors import ConcurrentUpdateError
from grid_tasks.errors import ConnectivityError

log = logging.getLogger(__name__)


#: The longest wait between two tries of a write while the database is away (seconds):
#: state converges within about this long of its return.
MAX_OUTAGE_DELAY_S = 2.0
#: Backoff before each retry in place of a database write that hit a dropped
#: connection (seconds): about 6 s, then the caller gives the work back (a report
#: message is requeued, an iteration runs again at its next trigger).
DB_RETRY_DELAYS = (0.1, 0.2, 0.5, 1.0, MAX_OUTAGE_DELAY_S, MAX_OUTAGE_DELAY_S)


def transient_db_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a lost or refused database connection worth retrying."""
    if isinstance(exc, (OperationalError, ConnectivityError)):
        return True  # ConnectivityError: grid_tasks.db's guard around a refused connect
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


def retrying(action: Any, attempts: int = 5,
             delays: tuple[float, ...] = DB_RETRY_DELAYS) -> Any:
    """Run ``action``, retrying optimistic-lock conflicts (``attempts`` times, quickly)
    and transient database errors (once per entry of ``delays``, sleeping it)."""
    conflicts = outages = 0
    while True:
        try:
            return action()
        except ConcurrentUpdateError:
            conflicts += 1
            if conflicts >= attempts:
                raise
            time.sleep(0.01 * conflicts)
        except Exception as exc:
            if not transient_db_error(exc) or outages >= len(delays):
                raise
            log.warning("database unavailable (%s); retrying in %.1f s",
                        type(exc).__name__, delays[outages])
            time.sleep(delays[outages])
            outages += 1


#: How long a write that finds another thread already waiting out the outage pauses
#: before giving its work back (seconds): a message requeued at once would loop hot.
OUTAGE_PAUSE_S = 0.2
_waiter = threading.Lock()


def retrying_one_at_a_time(action: Any) -> Any:
    """:func:`retrying`, but while the database is away only one thread of this process
    waits in place (with the backoff); another raises the transient error at once,
    after :data:`OUTAGE_PAUSE_S`, for its caller to give its work back (a report
    message is requeued).  The thread waiting finds the database's return within
    :data:`MAX_OUTAGE_DELAY_S`; the others are free to serve what needs no database
    or fails fast (a cancel taken in Redis, a typed refusal)."""
    try:
        return retrying(action, delays=())  # conflicts still retried at once
    except Exception as exc:
        if not transient_db_error(exc):
            raise
        if not _waiter.acquire(blocking=False):
            time.sleep(OUTAGE_PAUSE_S)
            raise
    try:
        return retrying(action)
    finally:
        _waiter.release()
