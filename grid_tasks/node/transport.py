"""A node daemon's broker transport and result backend: two Redis connections, not eight.

kombu's Redis transport gives every channel two connection pools of its own: one for
BRPOP and pub/sub (its "async" pool, which also answers the ``PING`` every channel
sends when it opens) and one for every other command.  A Celery worker opens several
channels - the task consumer, the event dispatcher, the producer pool that sends
registrations and reports, the remote-control mailbox - so an idle node daemon held
eight broker connections, six of them idle sockets.

:class:`Transport` keeps kombu's protocol and changes only where connections live:

* every channel of the process shares one *command* pool per Redis (a
  ``BlockingConnectionPool`` of one connection): acks, publishes, events, the
  unacked bookkeeping.  Commands are short and never block server-side, so threads
  take turns on it (a turn waits at most :data:`POOL_WAIT_S`);
* the PING a channel sends when it opens goes back to being closed: only the
  consuming channel keeps an async connection, the one BRPOP is parked on.

Result: BRPOP + one command connection.  Celery's own Redis transport stays for
every other worker (gatekeepers and schedulers have their own reasons for more).

:class:`NodeResultBackend` stores a node's few results (node checks; launches ignore
theirs) and closes its connection again: a node never reads results, so keeping a
socket open for the odd check would be a third broker-side connection for nothing.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any

import redis
from celery.backends.redis import RedisBackend
from celery.signals import worker_shutting_down
from kombu.transport import redis as kombu_redis

log = logging.getLogger(__name__)

#: Seconds a thread waits for its turn on the shared command connection before the
#: command fails (as a connection error: kombu and Celery retry or report those).
POOL_WAIT_S = 20.0
#: Seconds between the transport's upkeep: kombu's five periodic checks (restore scan,
#: pub/sub and BRPOP health, re-authentication, binding refresh), run in one wake-up
#: of the event loop rather than five timers of their own (25 s, 25 s, 60 s, 1 s and
#: the restore interval), each a wake-up of an idle daemon.  Node queues never expire
#: (nothing to refresh); a half-open BRPOP socket is dropped at the first upkeep once
#: its reply is ``health_check_interval`` overdue.
UPKEEP_S = 30.0
#: The cycle's attributes holding kombu's periodic timers (it cancels them on reconnect).
_KOMBU_TIMERS = ("_restore_messages_tref", "_subclient_health_tref", "_brpop_health_tref",
                 "_reauth_tref", "_binding_expiry_tref")

#: Queue key names a channel keeps (:meth:`Channel._q_for_pri`): every priority step of
#: a harness's thousands of node queues, with room to spare.
_PRI_KEYS_KEPT = 50_000

_pools: dict[str, redis.BlockingConnectionPool] = {}
_pools_lock = threading.Lock()
#: The channels of this process (a parked BRPOP is woken through them at shutdown).
_channels: "weakref.WeakSet[Channel]" = weakref.WeakSet()


def _pool_key(params: dict[str, Any]) -> str:
    """One shared pool per distinct server, database and credentials."""
    return repr(sorted((k, repr(v)) for k, v in params.items() if k != "max_connections"))


def shared_pool(params: dict[str, Any]) -> redis.BlockingConnectionPool:
    """This process's command pool for ``params`` (kombu's connection parameters)."""
    key = _pool_key(params)
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            options = {k: v for k, v in params.items() if k != "max_connections"}
            # No PING before a command on a connection idle 25 s (redis-py's health
            # check): a node's event every 30 s paid a second round trip for it.  The
            # pool already replaces a connection the server closed when it is taken.
            options["health_check_interval"] = 0
            pool = _pools[key] = redis.BlockingConnectionPool(
                max_connections=1, timeout=POOL_WAIT_S, **options)
        return pool


class Channel(kombu_redis.Channel):  # type: ignore[misc]
    """kombu's Redis channel with the process-wide command pool (see the module doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._pri_keys: dict[tuple[str, int], str] = {}
        super().__init__(*args, **kwargs)
        _channels.add(self)
        # kombu pinged through the async pool; that idle socket would stay open for
        # good in every channel that never consumes.  BRPOP reconnects on its own.
        if self._async_pool is not None:
            self._async_pool.disconnect(inuse_connections=False)

    def _q_for_pri(self, queue: str, pri: int) -> str:
        """kombu's Redis key of ``queue`` at priority ``pri``, kept once made.

        Every BRPOP names each consumed queue at every priority step, and kombu makes
        the names anew for each one: a scale harness consuming 500 node queues built
        2,000 key names (a bisect and a format each) per message it received."""
        keys = self._pri_keys
        key = keys.get((queue, pri))
        if key is None:
            if len(keys) > _PRI_KEYS_KEPT:
                keys.clear()
            key = keys[(queue, pri)] = super()._q_for_pri(queue, pri)
        return key

    def _get_pool(self, asynchronous: bool = False) -> Any:
        if asynchronous:
            return super()._get_pool(asynchronous=True)
        params = self._connparams(asynchronous=False)
        self.keyprefix_fanout = self.keyprefix_fanout.format(db=params["db"])
        return shared_pool(params)

    def close(self) -> None:
        if self._in_poll and not self.closed:
            self._unblock_brpop()
        super().close()

    def _unblock_brpop(self) -> None:
        """Have the pending BRPOP answer now: nil, or the message it just popped.

        kombu reads that reply when a channel closes (a message in it must not be
        lost); with a long poll a stopping daemon waited for the poll's end.  ``CLIENT
        UNBLOCK`` ends the wait the way a timeout would.  Where it cannot (a Redis user
        without the CLIENT command, a Unix socket) kombu simply waits as before.
        """
        sock = getattr(self._in_poll, "_sock", None)
        try:
            host, port = sock.getsockname()[:2]
            with self.conn_or_acquire() as client:
                for entry in client.client_list(_type="normal"):
                    if entry.get("addr") == f"{host}:{port}":
                        client.client_unblock(entry["id"])
        except Exception as exc:  # noqa: BLE001 - any failure: fall back to waiting
            log.debug("BRPOP not unblocked (%s); waiting for its timeout", exc)

    def _disconnect_pools(self) -> None:
        # The command pool is the process's, in use by other channels: one channel
        # closing (a producer released, the consumer reconnecting) must not cut their
        # commands off.  A dead socket in it is reconnected by its next command.
        self._pool = None
        super()._disconnect_pools()


def wake_polls() -> int:
    """Unblock every BRPOP this process has parked; how many channels were polling.

    A SIGTERM only sets Celery's stop flag: the event loop sees it when BRPOP returns,
    up to a whole poll later (a node daemon took 7-10 s to stop).  Woken, the loop
    stops at once and the channel's close reads the BRPOP's reply as before."""
    polling = [c for c in list(_channels) if c._in_poll and not c.closed]
    for channel in polling:
        channel._unblock_brpop()
    return len(polling)


def _wake_on_shutdown(**_: Any) -> None:
    """Celery's shutdown signal is sent from the SIGTERM handler, in the main thread that
    is parked in BRPOP: the Redis round trips go to a thread of their own."""
    if _channels:
        threading.Thread(target=wake_polls, daemon=True, name="wake BRPOP").start()


worker_shutting_down.connect(_wake_on_shutdown, weak=False,
                             dispatch_uid="grid_tasks.node.transport.wake")


class Transport(kombu_redis.Transport):  # type: ignore[misc]
    """kombu's Redis transport with :class:`Channel`, and one upkeep timer, not five."""

    Channel = Channel

    def register_with_event_loop(self, connection: Any, loop: Any) -> None:
        super().register_with_event_loop(connection, loop)
        cycle = self.cycle
        for attr in _KOMBU_TIMERS:
            tref = getattr(cycle, attr, None)
            if tref is not None:
                tref.cancel()
            setattr(cycle, attr, None)
        # kept where kombu looks: a reconnect's registration cancels it as it did its own
        cycle._binding_expiry_tref = loop.call_repeatedly(UPKEEP_S, upkeep, cycle)


def upkeep(cycle: Any) -> None:
    """kombu's periodic checks of ``cycle`` (its ``MultiChannelPoller``), each guarded:
    one failing (Redis away) must not skip the others, as separate timers did not."""
    for check in (cycle.maybe_restore_messages, cycle.maybe_check_subclient_health,
                  cycle.maybe_check_brpop_health, cycle.maybe_reauth,
                  cycle.maybe_refresh_binding_expiry):
        try:
            check()
        except Exception as exc:  # noqa: BLE001 - the event loop logged these too
            log.warning("transport upkeep %s failed: %s", check.__name__, exc)


class NodeResultBackend(RedisBackend):  # type: ignore[misc]
    """Celery's Redis result backend that hangs up after each store (see the module doc)."""

    def set(self, key: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().set(key, value, *args, **kwargs)
        finally:
            self.client.connection_pool.disconnect()


#: ``broker_transport`` and the result-backend prefix naming these classes.
TRANSPORT_PATH = f"{__name__}:Transport"
RESULT_BACKEND_PATH = f"{__name__}:NodeResultBackend"
