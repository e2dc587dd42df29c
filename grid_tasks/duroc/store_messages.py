"""Tagged message queues of the coordination store (mixed into ``CoordinationStore``).

A message is one list element ``b"<sender>:<payload>"`` pushed onto the list of
its destination *and tag*, so a receive for tag B never sees, consumes or
reorders a message with tag A: each tag has its own FIFO queue.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from grid_tasks.duroc.store_errors import (
    BarrierAbortedError, JobNotFoundError, ReceiveTimeoutError, RuntimeMisuseError, translated,
)
from grid_tasks.duroc.store_models import Message

if TYPE_CHECKING:  # the job side never imports redis-py (see grid_tasks.duroc.resp)
    import redis

    from grid_tasks.duroc.resp import RespClient


def encode(sender: int, data: bytes) -> bytes:
    """Wire form of a message from ``sender`` (a rank or a subjob address)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise RuntimeMisuseError(f"message payload must be bytes, not {type(data).__name__}")
    return b"%d:" % sender + bytes(data)


def decode(tag: str, raw: bytes) -> Message:
    sender, _, data = raw.partition(b":")
    return Message(int(sender), tag, data)


class MessagingMixin:
    """send/receive on message lists; needs ``client``, ``slice_s``, ``keys`` and ``_run``."""

    client: redis.Redis | RespClient
    slice_s: float

    def send(self, job: str, queue: str, sender: int, data: bytes) -> None:
        """Append a message to ``queue`` (a key named by ``JobKeys``), atomically with TTL.

        Raises :class:`BarrierAbortedError` once the job is aborted and
        :class:`JobNotFoundError` once it is purged, so nothing is left behind.
        """
        self._run("SEND", job, encode(sender, data), extra_keys=[queue])  # type: ignore[attr-defined]

    def receive(self, job: str, queue: str, tag: str, timeout: float | None = None) -> Message:
        """Pop the oldest message of ``queue``, blocking up to ``timeout`` seconds (None: no limit).

        Raises :class:`ReceiveTimeoutError`; between blocking slices it notices an
        aborted (:class:`BarrierAbortedError`) or vanished job.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = self.slice_s
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0:
                    raise ReceiveTimeoutError(f"no message with tag {tag!r} after {timeout} s",
                                              job=job)
            with translated(job):
                reply = self.client.blpop([queue], timeout=max(wait, 0.001))
            if reply is not None:
                return decode(tag, reply[1])
            self._check_alive(job)

    def _check_alive(self, job: str) -> None:
        with translated(job):
            state, reason = self.client.hmget(self.keys(job).meta,  # type: ignore[attr-defined]
                                              ["state", "reason"])
        if state is None:
            raise JobNotFoundError("coordination state vanished (purged or expired)", job=job)
        if state == b"aborted":
            text = (reason or b"").decode(errors="replace")
            raise BarrierAbortedError(f"aborted: {text}", job=job, reason=text)

