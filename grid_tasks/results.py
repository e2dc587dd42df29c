"""Celery result handles of a client's app, released while their Redis still runs.

Every task sent without ``ignore_result`` subscribes the app's result consumer to
the task's result channel; the subscription is dropped by ``AsyncResult.__del__``
whenever the handle is collected.  A handle collected after the Redis stopped
(the embedded grid's at the end of ``grid-tasks demo``) then retries, fails and
prints "Retry limit exceeded" from ``__del__``.  :func:`release_results` drops
every subscription at once, so handles collected later have nothing to undo.
"""

from __future__ import annotations

import gc
import logging
from typing import Any

log = logging.getLogger(__name__)


def release_results(app: Any) -> int:
    """Unsubscribe ``app``'s result consumer from every task result; how many it held.

    Collects garbage first (handles in reference cycles unsubscribe now).  If the
    Redis is gone already, the bookkeeping is dropped without talking to it.
    """
    backend = getattr(app, "_backend", None)  # made on first use (Celery's app.backend)
    if backend is None:  # never made: nothing was subscribed through this app
        return 0
    gc.collect()
    consumer = getattr(backend, "result_consumer", None)
    subscribed = getattr(consumer, "subscribed_to", None)
    if not subscribed:
        return 0
    held = len(subscribed)
    prefix = backend.task_keyprefix
    try:
        backend.client.ping()  # a stopped Redis refuses at once; the consumer would retry
        for key in list(subscribed):
            text = key.decode() if isinstance(key, bytes) else str(key)
            consumer.cancel_for(text[len(prefix):] if text.startswith(prefix) else text)
    except Exception as exc:  # the Redis stopped first: forget rather than retry forever
        log.debug("result subscriptions dropped without unsubscribing: %s", exc)
    subscribed.clear()
    return held
