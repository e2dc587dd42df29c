"""A leadership lease in Redis: one holder at a time, lost when not renewed.

The lease is a single key holding the holder's identity with a TTL.  Claiming
and renewing are the same atomic script: take the key if it is free, extend it
if it is ours, refuse if someone else holds it.  A holder that stops renewing
(killed, paused, cut off) loses the lease after ``ttl`` seconds and a standby
polling :meth:`Lease.claim` takes it over.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from grid_tasks.errors import ConfigError

# KEYS[1] lease key; ARGV[1] identity; ARGV[2] ttl ms.  1 = held by us now, 0 = someone else.
_CLAIM = """
local holder = redis.call('GET', KEYS[1])
if (not holder) or holder == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""

# Release only our own lease: a late release must never free a successor's.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


@dataclass(frozen=True)
class Holder:
    """Who holds a lease and for how much longer (milliseconds)."""

    identity: str
    ttl_ms: int


class Lease:
    """One identity's handle on the lease stored at ``key``.

    ``held`` is the local belief, refreshed by every :meth:`claim`;
    :meth:`fresh` tells whether the last successful claim is recent enough
    (half the TTL) to act on without asking Redis again.
    """

    def __init__(self, client: Any, key: str, identity: str, ttl: float) -> None:
        if not ttl > 0:
            raise ConfigError(f"lease {key!r}: ttl must be positive, got {ttl!r}")
        self.client = client
        self.key = key
        self.identity = identity
        self.ttl = float(ttl)
        self.held = False
        self._claimed_at: float | None = None  # monotonic time of the last successful claim
        self._claim = client.register_script(_CLAIM)
        self._release = client.register_script(_RELEASE)

    def claim(self) -> bool:
        """Take or extend the lease; False when another identity holds it."""
        started = time.monotonic()
        ok = bool(self._claim(keys=[self.key], args=[self.identity, int(self.ttl * 1000)]))
        self.held = ok
        self._claimed_at = started if ok else None
        return ok

    def fresh(self) -> bool:
        """True when our last successful claim is younger than half the TTL."""
        return (self.held and self._claimed_at is not None
                and time.monotonic() - self._claimed_at < self.ttl / 2)

    def release(self, client: Any = None) -> bool:
        """Give the lease up (only if still ours) so a standby takes over at once.

        ``client``: another Redis client to do it with (from a signal handler,
        which must not touch a connection pool the interrupted code may hold).
        """
        self.held = False
        self._claimed_at = None
        return bool(self._release(keys=[self.key], args=[self.identity], client=client))

    def holder(self) -> Holder | None:
        """The current holder, or None when the lease is free."""
        return read_holder(self.client, self.key)


def read_holder(client: Any, key: str) -> Holder | None:
    """Who holds the lease at ``key`` (None if nobody)."""
    pipe = client.pipeline(transaction=True)
    pipe.get(key)
    pipe.pttl(key)
    value, ttl_ms = pipe.execute()
    if value is None:
        return None
    identity = value.decode() if isinstance(value, bytes) else str(value)
    return Holder(identity, max(0, int(ttl_ms)))
