"""Heartbeats that Redis does not answer: one socket write, no wait for a reply.

An idle node daemon does almost nothing but beat, and a beat's reply is what costs:
after 5 s asleep, the heartbeat thread wakes once to send and once more to read the
answer, and each cold wake-up costs a Python thread several hundred microseconds
(``benchmarks/bench_idle.py``; a beat's Redis work is ~100 us hot).  Redis can be
told not to answer: ``CLIENT REPLY SKIP`` drops the reply of the next command, so
``CLIENT REPLY SKIP`` + ``EVAL <heartbeat script>`` go out in one write and nothing
comes back.  The connection is left with no reply pending, so the daemon's job
managers, which share it (:func:`~grid_tasks.node.registry.daemon_client`), read
only their own answers.

What an unanswered beat cannot tell - whether the node had turned Unknown (the
"revived" answer) and whether Redis refused the write (out of memory, a read-only
replica after a failover) - the heartbeat thread still learns from the answered beats
it sends in between (:func:`answer_due`): the first, every :data:`ANSWER_EVERY`-th,
the one after a failure, and any beat sent later than a TTL after the previous one.

``EVAL`` carries the script itself, not its SHA: an unanswered ``EVALSHA`` to a
server that lost its script cache (a restart) would fail with nobody to hear it.

Where Redis refuses ``CLIENT REPLY`` (an ACL user without it, a proxy in between),
:meth:`QuietBeat.supported` says so once, and the daemon answers every beat as before.
"""

from __future__ import annotations

import logging
import select
from queue import Empty, Queue
from typing import Any

import redis

from grid_tasks.node.redis_errors import connectivity

log = logging.getLogger(__name__)

#: Every how many beats one is answered (revived? refused?): with the grid's 5 s
#: interval, every 30 s - the node watch notices a node back within one TTL anyway.
ANSWER_EVERY = 6
_PROBE = b"grid_tasks:quiet-beat-probe"
#: Seconds a beat waits for its turn on the daemon's one connection (as the pool's).
POOL_WAIT_S = 20.0


def answer_due(beats: int, since_answered: int, last_ok: bool, gap: float | None,
               ttl: float) -> bool:
    """Whether the next beat must be answered.

    ``beats``: beats sent so far; ``since_answered``: beats since the last answered one;
    ``last_ok``: the previous beat went out without error; ``gap``: seconds since the
    previous beat went out (None: none yet).  A gap of a TTL or more means the alive
    key may have expired in between: only an answer tells whether the node is back.
    """
    return (beats == 0 or not last_ok or since_answered + 1 >= ANSWER_EVERY
            or gap is None or gap >= ttl)


def _bulk(value: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(value), value)


#: ``CLIENT REPLY SKIP``: the next command is not answered.
_SKIP_NEXT = b"*3\r\n" + _bulk(b"CLIENT") + _bulk(b"REPLY") + _bulk(b"SKIP")


class QuietBeat:
    """Unanswered heartbeats of one node over ``client`` (its one-connection pool)."""

    def __init__(self, client: redis.Redis, script: str, alive_key: str, node_key: str,
                 ttl_ms: int) -> None:
        self.client = client
        self._supported: bool | None = None
        # Everything but the payload and the time is the same in every beat: packed once.
        self._prefix = (_SKIP_NEXT + b"*8\r\n" + _bulk(b"EVAL") + _bulk(script.encode())
                        + _bulk(b"2") + _bulk(alive_key.encode()) + _bulk(node_key.encode()))
        self._ttl = _bulk(str(ttl_ms).encode())

    def supported(self) -> bool:
        """Whether this Redis drops replies on request (asked once, then remembered).

        ``CLIENT REPLY SKIP`` + ``ECHO 1`` + ``ECHO probe``: a server that honours it
        answers ``probe`` alone; one that refuses answers an error (or OK) first, and
        the connection, with replies still pending, is dropped rather than handed on.
        """
        if self._supported is None:
            packed = (_SKIP_NEXT + b"*2\r\n" + _bulk(b"ECHO") + _bulk(b"1")
                      + b"*2\r\n" + _bulk(b"ECHO") + _bulk(_PROBE))
            self._supported = self._exchange(packed) == _PROBE
            if not self._supported:
                log.info("Redis does not drop replies on request (CLIENT REPLY); "
                         "every heartbeat is answered")
        return self._supported

    def _exchange(self, packed: bytes) -> Any:
        pool = self.client.connection_pool
        with connectivity(self.client):
            conn = pool.get_connection()
            try:
                conn.send_packed_command([packed], check_health=False)
                try:
                    first = conn.read_response()
                except redis.ResponseError:
                    first = None
                if first != _PROBE:
                    conn.disconnect()  # the replies after the first are still on the way
                return first
            except BaseException:
                conn.disconnect()
                raise
            finally:
                pool.release(conn)

    def send(self, payload: str, now: float) -> None:
        """One beat (``payload`` the alive key's value, ``now`` the hash's time), not
        answered.  A connection failure raises, as an answered beat's would."""
        packed = b"".join((self._prefix, _bulk(payload.encode()), self._ttl,
                           _bulk(repr(now).encode())))
        pool = self.client.connection_pool
        queue = _idle_queue(pool)
        with connectivity(self.client):
            conn = _take_ready(queue) if queue is not None else None
            if conn is None:  # redis-py's own checkout: it reconnects what needs it
                conn, queue = pool.get_connection(), None
            try:
                conn.send_packed_command([packed], check_health=False)
            except BaseException:
                conn.disconnect()  # half a command may have gone out
                raise
            finally:
                if queue is not None:
                    queue.put_nowait(conn)
                else:
                    pool.release(conn)


def _idle_queue(pool: Any) -> Queue | None:
    """The queue of idle connections of a ``BlockingConnectionPool`` (None: another pool).

    A beat takes its connection from it directly: redis-py's checkout and return
    (metrics bookkeeping, a fork check, a three-syscall "anything to read?" test) were
    ~45% of a cold unanswered beat, ~200 us every 5 s (measured in a thread waking
    every 5 s, as the heartbeat does).  What the checkout guards against is kept: a
    connection with something to read (the server closed it) goes to redis-py's
    checkout, which reconnects it."""
    queue = getattr(pool, "pool", None) if isinstance(pool, redis.BlockingConnectionPool) \
        else None
    return queue if isinstance(queue, Queue) else None


def _take_ready(queue: Queue) -> Any:
    """An idle connected connection with nothing to read, or None (put back as found)."""
    try:
        conn = queue.get(True, POOL_WAIT_S)
    except Empty:
        raise redis.ConnectionError("No connection available.") from None
    sock = getattr(conn, "_sock", None)
    if sock is not None:
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        if not poller.poll(0):
            return conn
    queue.put_nowait(conn)
    return None
