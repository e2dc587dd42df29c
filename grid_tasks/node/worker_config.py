"""The Celery settings of a node daemon: what each costs an idle node, and why chosen.

A grid has one gatekeeper per RM and a few scheduler workers, but up to thousands of
node daemons: whatever a node daemon does while idle is multiplied by the nodes.
Measured on one idle daemon with Celery's defaults (benchmarks/bench_idle.py):
~0.2% of a core and 8-10 Redis connections; Redis ``maxclients`` (10,000) was reached
near 1,200 nodes.  The settings below, applied by :func:`node_worker_config` (the one
place: real daemons and the scale harness both use it), cost it instead:

=============================  ========================  ==================================
setting                        Celery's default costs     node daemon's choice, and why
=============================  ========================  ==================================
remote control (pidbox)        a fanout subscription      off: one Redis connection and a
``worker_enable_remote_        (its own connection) and   PSUBSCRIBE per node.  Nodes are
control``                      a channel (two more)       stopped by their supervisor; Flower
                                                          still lists them (events), only its
                                                          per-worker inspect page is empty
broker transport               two pools per kombu        :mod:`grid_tasks.node.transport`:
(``broker_transport``)         channel, 4 channels: 8     BRPOP + one shared command
                               connections                connection
result backend                 a connection kept open     opened per store and closed: a node
                               after the first result     stores only node-check answers
restore scan of unacked        every daemon scans the     nodes never scan (throttle
tasks (``unacked_restore_      broker-wide ``unacked``    :data:`NO_RESTORE_SCAN`; the timer
interval``/``_throttle``)      index every 5 s: 4         hourly).  The index is per Redis,
                               commands per node          not per consumer: gatekeepers and
                                                          schedulers scan it every 5 s, and
                                                          restore a dead node's launches too
BRPOP timeout                  1 s: a reply and re-arm    :data:`BROKER_POLL_S` (30 s); a
(``polling_interval``)         and a loop wake-up each    message still wakes BRPOP at once.
                               second                     A half-open socket is dropped at
                                                          the first upkeep after poll +
                                                          ``health_check_interval`` (55-85 s)
event loop's longest wait      10 s (kombu's hub and      :data:`HUB_WAIT_S`: only what is
                               Celery's timer cap it)     due wakes it (:mod:`grid_tasks.
                                                          node.event_loop`)
kombu's periodic checks        five timers: 1 s, 25 s,    one upkeep every
(restore, health, reauth,      25 s, 60 s, restore        :data:`~grid_tasks.node.transport.
binding refresh)               interval                   UPKEEP_S` (30 s)
PING before a command idle     one more round trip per    none on the command connection
25 s (redis-py health check)   30 s event                 (a closed one is replaced when
                                                          taken from the pool)
node heartbeats (every         a reply read per beat: a   most beats unanswered (``CLIENT
``heartbeat_interval``)        second wake-up each        REPLY SKIP``; :mod:`grid_tasks.
                                                          node.quiet_beat`), every 6th and
                                                          the one after a failure answered
worker heartbeat events        one PUBLISH every 2 s      every :data:`HEARTBEAT_EVENT_S`;
(``--heartbeat-interval``)                                Flower reads the interval from the
                                                          event and keeps a node "online"
                                                          for twice it
task events                    per task, not idle cost    kept: Flower's task views
``reauth_check_interval``      loop wake-up every 10 s    in the upkeep (streaming
                                                          credentials only)
gossip, mingle                 a subscription; startup    off (as for every worker)
                               round trip
node's own Redis (registry,    one pool per user          one client, one connection
heartbeats, leases)                                       (:func:`grid_tasks.node.registry.
                                                          daemon_client`)
=============================  ========================  ==================================

``GRID_TASKS_LEAN_NODES=0`` gives a node daemon Celery's defaults back (for Flower's
inspect page on nodes, or to compare: ``bench_idle.py`` runs both).
"""

from __future__ import annotations

from typing import Any

from grid_tasks.node.transport import RESULT_BACKEND_PATH, TRANSPORT_PATH

#: Seconds between a node worker's heartbeat events (Flower's "online").
HEARTBEAT_EVENT_S = 30.0
#: Seconds a node's BRPOP waits server-side before it is sent again.
BROKER_POLL_S = 30.0
#: Longest wait of a node daemon's event loop when nothing is due (Celery's: 10 s;
#: :mod:`grid_tasks.node.event_loop`): no shorter than the poll, or it wakes for nothing.
HUB_WAIT_S = BROKER_POLL_S
#: Restore-scan throttle of a node: only the first call (at connect) scans.
NO_RESTORE_SCAN = 10**9
#: Seconds between the (throttled, so empty) restore timer's calls on a node.
RESTORE_TIMER_S = 3600
#: App setting marking a node daemon's app as configured here.
LEAN_FLAG = "grid_tasks_lean_node"
_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def client_name(rm: str, node: str) -> str:
    """The name a node daemon's Redis connections carry (``CLIENT LIST``, ``CLIENT KILL``)."""
    return f"node.{rm}.{node}"


def node_worker_config(base: dict[str, Any], rm: str, node: str) -> dict[str, Any]:
    """The settings of node daemon ``rm``/``node`` over ``base`` (``celery_config``'s).

    Only settings that differ are returned; apply them with ``app.conf.update``.
    """
    name = client_name(rm, node)
    transport = dict(base.get("broker_transport_options") or {})
    transport.update(unacked_restore_interval=RESTORE_TIMER_S,
                     unacked_restore_throttle=NO_RESTORE_SCAN,
                     polling_interval=BROKER_POLL_S, reauth_check_interval=60,
                     client_name=name)
    conf: dict[str, Any] = {
        LEAN_FLAG: True,
        "worker_enable_remote_control": False,
        "broker_transport_options": transport,
        "broker_pool_limit": 1,
        "redis_client_name": name,
    }
    if str(base.get("broker_url", "")).startswith(_REDIS_SCHEMES):
        conf["broker_transport"] = TRANSPORT_PATH
    backend = str(base.get("result_backend", ""))
    if backend.startswith(_REDIS_SCHEMES[:2]):
        conf["result_backend"] = f"{RESULT_BACKEND_PATH}+{backend}"
    return conf


def node_worker_options() -> dict[str, Any]:
    """``WorkController`` keyword arguments of a node daemon (no app setting exists)."""
    return {"heartbeat_interval": HEARTBEAT_EVENT_S}


def node_worker_argv() -> list[str]:
    """The same as ``celery worker`` arguments."""
    return ["--heartbeat-interval", f"{HEARTBEAT_EVENT_S:g}"]
