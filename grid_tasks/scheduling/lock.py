"""The iteration lock of a resource manager: short-lived, renewed while its holder lives.

One iteration per RM at a time is kept by a Redis key holding the holder's token.
Its TTL is short (:data:`LOCK_TTL_MS`) and a :class:`LockKeeper` thread of the
holding process renews it every third of that, so a holder that dies (SIGKILL, a lost
host) stalls its RM for at most one TTL, not for the longest iteration one could
imagine.  A holder that lives but hangs keeps it at most :data:`MAX_HOLD_S`: past
that the keeper stops renewing and another process may iterate (optimistic locking on
job rows keeps two overlapping iterations from undoing each other).

A caller that finds the lock held leaves a pending trigger for the holder, and - once
per TTL window - a delayed iteration at the lock's expiry (:data:`WATCH`): if the
holder died, that iteration takes the lapsed lock and runs the trigger nobody else
would have run until beat's next period.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

#: The lock lapses this long after its holder stopped renewing it (milliseconds).
LOCK_TTL_MS = 5_000
#: A living holder keeps the lock at most this long (a hung iteration).
MAX_HOLD_S = 60.0

#: ``acquire`` outcomes: taken; held by another (its trigger is pending); held by another
#: and this caller must send the delayed iteration that looks again at the lock's expiry.
TAKEN, HELD = 1, 0

# KEYS: queued, lock, dirty, watch.  ARGV: token, lock TTL (ms).  Takes the lock (1),
# clearing the pending trigger it runs for; else marks one pending, so the holder runs
# again, and returns 0 - or, once per TTL window, -(ms until the lock expires): the
# caller then sends an iteration for that moment, which finds a dead holder's lock gone.
# One round trip, and EVAL: a registered script would ask SCRIPT EXISTS first.
ACQUIRE = """
redis.call('DEL', KEYS[1])
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', tonumber(ARGV[2])) then
  redis.call('DEL', KEYS[3])
  return 1
end
redis.call('SET', KEYS[3], 1)
local left = redis.call('PTTL', KEYS[2])
if left > 0 and redis.call('SET', KEYS[4], 1, 'NX', 'PX', left) then return -left end
return 0
"""

# KEYS: lock, dirty.  Releases our lock; returns 1 if a trigger is pending.
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return redis.call('EXISTS', KEYS[2])
"""

# KEYS: lock.  ARGV: token, TTL (ms).  Extends our lock; 0 if it is no longer ours.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
end
return 0
"""


def watch_key(lock: str) -> str:
    """The key that limits the delayed look at a held lock to one per TTL window."""
    return f"{lock}:watch"


class LockKeeper:
    """Renews, from one daemon thread per process, every iteration lock it holds.

    A thread per process rather than per iteration: the gatekeeper takes the lock on
    every submission, and starting a thread each time would cost more than the
    renewals.  The thread starts on the first lock and sleeps while none is held.
    """

    def __init__(self, client: Any, ttl_ms: int = LOCK_TTL_MS,
                 max_hold_s: float = MAX_HOLD_S) -> None:
        self.client, self.ttl_ms, self.max_hold_s = client, ttl_ms, max_hold_s
        self._held: dict[str, tuple[str, float]] = {}  # key -> (token, taken at)
        self._mutex = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, key: str, token: str) -> None:
        """Keep ``key`` (taken with ``token``) alive until :meth:`drop`."""
        with self._mutex:
            self._held[key] = (token, time.monotonic())
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="iteration lock keeper")
                self._thread.start()
        self._wake.set()

    def drop(self, key: str) -> None:
        """Stop renewing ``key`` (its holder released it)."""
        with self._mutex:
            self._held.pop(key, None)

    def renew_now(self) -> list[str]:
        """One renewal round; the keys renewed (the rest lapse by themselves)."""
        now = time.monotonic()
        with self._mutex:
            due = [(k, t) for k, (t, since) in self._held.items()
                   if now - since < self.max_hold_s]
            for key in [k for k, (_, since) in self._held.items()
                        if now - since >= self.max_hold_s]:
                log.warning("iteration lock %s held over %.0f s: no longer renewed", key,
                            self.max_hold_s)
                self._held.pop(key)
        if not due:
            return []
        pipe = self.client.pipeline(transaction=False)
        for key, token in due:
            pipe.eval(_RENEW, 1, key, token, self.ttl_ms)
        return [key for (key, _), ok in zip(due, pipe.execute()) if ok]

    def _run(self) -> None:
        period = self.ttl_ms / 3000.0
        while True:
            with self._mutex:
                idle = not self._held
            if idle:
                self._wake.wait()
                self._wake.clear()
            time.sleep(period)  # a fresh lock has a whole TTL: the first renewal can wait
            try:
                self.renew_now()
            except Exception as exc:  # Redis away: the next round tries again
                log.warning("iteration lock renewal failed: %s", exc)
