"""The Celery consumer of every grid_tasks worker: one that survives a Redis restart.

Celery 5.7 handles a lost broker connection by ``collect()``-ing it and then
closing it.  With kombu's Redis transport, when the connection drops while a
``BRPOP`` is pending *and* deliveries are unacknowledged (an acks-late launch
running, a prefetched iteration), the first close stops at the pending read,
``collect()`` then detaches the transport (``transport.client = None``), and the
second close tries to put the unacknowledged messages back through a client it
can no longer build: ``AttributeError: 'NoneType' object has no attribute
'hostname'`` - an "unrecoverable error" that ends the worker process (see
celery/kombu issues about that AttributeError on reconnects and restarts).

:class:`ResilientConsumer` settles the unacknowledged deliveries *before* Celery's
clean-up, while the transport can still make a client: they are restored to their
queue when Redis already answers again, else dropped from the local bookkeeping
only - kombu keeps each one in Redis's ``unacked`` hash, from which the
visibility-timeout restore brings it back (when Redis kept its data).  The
later close then finds nothing to restore and the consumer reconnects as usual.
Afterwards the lost transport gets its connection info back (:func:`reattach`), so
the late acknowledgement of a task that was running does not crash either.

Selected by ``worker_consumer`` in :func:`grid_tasks.celery_app.celery_config`.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.worker.consumer import Consumer
from celery.worker.state import maybe_shutdown

from grid_tasks.security.refusals import refuse
from grid_tasks.security.signing import MessageRefused, signer_id

log = logging.getLogger(__name__)


def settle_unacked(connection: Any) -> None:
    """Restore (or, Redis being down, forget locally) the unacknowledged deliveries of
    ``connection``'s default channel, leaving kombu's QoS consistently "restored"."""
    channel = getattr(connection, "_default_channel", None)  # kombu has no public accessor
    qos = getattr(channel, "_qos", None)
    if qos is None:
        return
    try:
        qos.restore_unacked_once()
    except Exception as exc:  # noqa: BLE001 - any failure: Redis is gone; do not die of it
        log.warning("broker connection lost: %d unacknowledged deliveries left to the "
                    "visibility-timeout restore (%s)", len(qos._delivered), exc)
    finally:
        # kombu marks the state restored even when restoring failed; an uncleared one
        # would trip its own "restored and still not empty" assertion on the next close.
        qos._delivered.clear()


class ResilientConsumer(Consumer):  # type: ignore[misc]
    """Celery's consumer, minus the crashes on a Redis restart (see the module doc).

    Once connected it also never gives up reconnecting: ``broker_connection_max_retries``
    (a few attempts, ~12 s) keeps a worker started without its broker failing fast,
    but a Redis restart that takes longer (loading a large dump) must not end a
    running worker either.
    """

    def ensure_connected(self, conn: Any) -> Any:
        if self.first_connection_attempt:
            return super().ensure_connected(conn)  # startup: bounded, fails fast

        def retrying(exc: Exception, interval: float) -> None:
            log.error("consumer: cannot reconnect to %s: %s; trying again in %.0f s",
                      conn.as_uri(), exc, interval)

        conn = conn.ensure_connection(retrying, None, callback=maybe_shutdown,
                                      interval_start=1, interval_step=2, interval_max=10)
        self.broker_connection_retry_attempt = 0
        return conn

    def on_connection_error_after_connected(self, exc: Exception) -> None:
        lost = self.connection
        # private attributes: the public properties would build new ones
        transport = getattr(lost, "_transport", None)
        channel = getattr(lost, "_default_channel", None)
        if lost is not None:
            settle_unacked(lost)
        super().on_connection_error_after_connected(exc)
        reattach(channel, transport, lost)

    # -- refused messages: one line each, counted (grid_tasks.security.refusals) -------
    def on_decode_error(self, message: Any, exc: Exception) -> None:
        """A body that does not verify (unknown signer, bad signature): refused, acked."""
        _refused(self.app, message, exc)
        message.ack()

    def on_invalid_task(self, body: Any, message: Any, exc: Exception) -> None:
        """A message of a content type this worker does not accept (unsigned): refused."""
        _refused(self.app, message, exc)
        message.reject_log_error(log, self.connection_errors)


def _refused(app: Any, message: Any, exc: Exception) -> None:
    """Log and count a message refused before any task saw it; tell its sender why.

    The sender of a request (a client with an untrusted or expired key) waits on the
    task's result: it gets the refusal as its failure at once instead of a timeout.
    (A forged message could thereby mark another request as refused: an attacker able
    to publish can do worse, such as delete the queue; it cannot make anything run.)
    """
    headers = getattr(message, "headers", None) or {}
    queue = (getattr(message, "delivery_info", None) or {}).get("routing_key")
    task = headers.get("task")
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    signer = signer_id(message.body)
    refuse(app, queue=queue, signer=signer, reason=reason, task=task)
    task_id = headers.get("id")
    if task_id and not headers.get("ignore_result"):
        why = MessageRefused(f"{task or 'request'} refused on queue {queue}: "
                             f"{'signer ' + repr(signer) + ': ' if signer else ''}{reason}")
        try:
            app.backend.mark_as_failure(task_id, why)
        except Exception as err:  # the result backend down: the log line stays
            log.debug("refusal of %s not stored: %s", task_id, err)


def reattach(channel: Any, transport: Any, connection: Any) -> None:
    """Give the lost connection's closed channel its transport and connection info back.

    A task running when the connection was lost acknowledges (acks late) through the
    old channel; kombu's Redis channel then builds a client from
    ``channel.connection.client``, both of which the clean-up set to None: another
    AttributeError ending the worker.  With them back, that late ack reaches the
    restarted Redis (removing the delivery from its ``unacked`` index) or fails with
    a connection error, which Celery logs and survives.
    """
    if channel is None or transport is None or connection is None:
        return
    if getattr(transport, "client", None) is None:
        transport.client = connection
    if getattr(channel, "connection", None) is None:
        channel.connection = transport
