"""Refused messages: one log line each, and a count per reason that metrics export.

A worker refuses a message that is not signed, signed by a key it does not trust,
tampered with, or signed by a role its task does not admit; a gatekeeper refuses a
node's report its own records do not vouch for (``bad_report``).  Each refusal is
logged once, as one line naming the queue, the signer and the reason (no
traceback: an attacker must not be able to flood the logs with them), and counted
in the coordination store's hash :data:`REFUSED_KEY`, field = reason kind, which
``grid-tasks metrics`` exports as ``grid_tasks_messages_refused_total``, and per queue
(:func:`queue_key`), so a check can tell whose refusal it was.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from grid_tasks.security.connections import redis_client

log = logging.getLogger("grid_tasks.security")

REFUSED_KEY = "grid:security:refused"
_clients: dict[int, Any] = {}
_lock = threading.Lock()


#: (text in the reason, its kind): the first that matches names a refusal's kind.
_NEEDLES = (("bad report", "bad_report"), ("unknown signer", "unknown_signer"), ("bad signature", "bad_signature"),
            ("expired", "expired_certificate"), ("not signed", "unsigned"),
            ("untrusted content", "unsigned"), ("disallowed", "unsigned"),
            ("signed for task", "task_mismatch"), ("remote-control", "control"),
            ("role", "role"))
#: Every kind of refusal (metrics show each, zero until it happens).
KINDS: tuple[str, ...] = (*dict.fromkeys(kind for _, kind in _NEEDLES), "other")


def reason_kind(reason: str) -> str:
    """A short, bounded label for a refusal reason (a metrics label must not grow)."""
    text = reason.lower()
    return next((kind for needle, kind in _NEEDLES if needle in text), "other")


def refuse(app: Any, *, queue: str | None, signer: str | None, reason: str,
           task: str | None = None) -> None:
    """Log one line for a refused message and count it (counting never raises)."""
    log.warning("refused message on queue %s from %s%s: %s", queue or "?",
                signer or "an unknown signer", f" for {task}" if task else "", reason)
    kind = reason_kind(reason)
    try:
        pipe = _client(app).pipeline(transaction=False)
        pipe.hincrby(REFUSED_KEY, kind, 1)
        if queue:
            pipe.hincrby(queue_key(queue), kind, 1)
        pipe.execute()
    except Exception as exc:  # Redis down: the log line is the record
        log.debug("refusal not counted: %s", exc)


def _client(app: Any) -> Any:
    with _lock:
        found = _clients.get(id(app))
        if found is None:
            settings = getattr(app, "grid_settings")
            found = _clients[id(app)] = redis_client(settings, settings.redis_url)
        return found


def queue_key(queue: str) -> str:
    """The hash counting the refusals of messages taken from ``queue``."""
    return f"{REFUSED_KEY}:queue:{queue}"


def counts(client: Any, queue: str | None = None) -> dict[str, int]:
    """Refusals so far, by reason kind (of ``queue`` alone, when given)."""
    raw = client.hgetall(REFUSED_KEY if queue is None else queue_key(queue)) or {}
    return {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in raw.items()}
