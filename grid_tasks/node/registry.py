"""Node registrations and heartbeats in Redis; node states derived from key expiry.

Keys (``<rm>``/``<node>`` are queue-safe names):

* ``grid_tasks:node:<rm>:<node>`` - hash: resources, host facts, status, times;
* ``grid_tasks:alive:<rm>:<node>`` - the last heartbeat, set with a TTL.  When a
  daemon goes silent the key expires and the node reads as Unknown without
  anyone acting;
* ``grid_tasks:nodes`` - set of ``<rm>/<node>`` ever registered;
* ``grid_tasks:rmnodes:<rm>`` - set of the nodes of ``<rm>`` ever registered, so that
  what is read per RM (its node watch every TTL, its iterations) does not grow with
  the nodes of every other RM of the grid.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from grid_tasks.errors import ConnectivityError, NotFoundError
from grid_tasks.node.heartbeat_scripts import (HEARTBEAT_MANY_SCRIPT, HEARTBEAT_SCRIPT,
                                               QUIET_HEARTBEAT_SCRIPT)
from grid_tasks.node.quiet_beat import QuietBeat
from grid_tasks.node.redis_errors import connectivity
from grid_tasks.node.silent import silent_nodes
from grid_tasks.security.config import RedisTLS, is_tls_url
from grid_tasks.security.connections import redis_client
from grid_tasks.settings import Settings
from grid_tasks.states import NodeState

if TYPE_CHECKING:  # the DUROC runtime inside job processes imports us: keep it light
    from grid_tasks.topology import GridTopology

PREFIX = "grid_tasks"
NODES_SET = f"{PREFIX}:nodes"


def rm_nodes_key(rm: str) -> str:
    """Set of the node names of ``rm`` ever registered."""
    return f"{PREFIX}:rmnodes:{rm}"


def connect_redis(url: str, *, settings: Any = None, environ: Mapping[str, str] | None = None,
                  **options: Any) -> redis.Redis:
    """The Redis client of a grid_tasks store (node registry, tokens, DUROC store).

    Built by :func:`grid_tasks.security.connections.redis_client`, so a password or ACL
    user in ``url`` is used and a ``rediss://`` URL gets TLS options: those of
    ``settings.redis_tls`` when ``settings`` is given, else the
    ``GRID_TASKS_REDIS_TLS_*`` variables of ``environ`` (default: this process's
    environment - what ``Settings.from_env`` would read).  ``options`` go to redis-py.
    """
    if settings is None:
        env = os.environ if environ is None else environ
        # Plain URLs never read the TLS variables: a stray bad one must not break them.
        tls = RedisTLS.from_env(env) if is_tls_url(url) else RedisTLS()
        settings = Settings(redis_url=url, redis_tls=tls)
    return redis_client(settings, url, **options)


#: Nodes per heartbeat script call: one call keeps Redis busy for ~1 us per node.
HEARTBEAT_CHUNK = 1000
#: Seconds a node daemon's thread waits for its turn on the daemon's one Redis connection.
DAEMON_POOL_WAIT_S = 20.0


def daemon_client(app: Any, settings: Any) -> redis.Redis:
    """The one Redis client of a node daemon's app (registry, heartbeats, job managers'
    leases and output), made on first use.

    A lean node daemon (:mod:`grid_tasks.node.worker_config`) gets one connection, its
    threads taking turns (their commands are short; none blocks server-side), named as
    the daemon's broker connections; otherwise a pool as every other client has.
    """
    client = getattr(app, "grid_daemon_redis", None)
    if client is None:
        options: dict[str, Any] = dict(socket_connect_timeout=2, socket_timeout=5,
                                       retry=Retry(NoBackoff(), 1))
        name = app.conf.get("redis_client_name")
        if app.conf.get("grid_tasks_lean_node"):
            options.update(connection_pool_class=redis.BlockingConnectionPool,
                           max_connections=1, timeout=DAEMON_POOL_WAIT_S)
        if name:
            options["client_name"] = name
        client = app.grid_daemon_redis = connect_redis(settings.redis_url, settings=settings,
                                                       **options)
    return client


def heartbeat_payload(now: float, active: int) -> str:
    """The alive key's value: when, and how many tasks the daemon executes."""
    return json.dumps({"at": now, "active": active})


def node_key(rm: str, node: str) -> str:
    return f"{PREFIX}:node:{rm}:{node}"


def alive_key(rm: str, node: str) -> str:
    return f"{PREFIX}:alive:{rm}:{node}"


def node_state(alive: dict[str, Any] | None, registration: dict[str, Any] | None) -> NodeState:
    """The Maui state of a node from its live heartbeat (if any) and registration.

    A node with a heartbeat is Idle, or Running while it executes tasks.  Without one
    it is Down if its daemon said goodbye, else Unknown (silent, or never seen).
    """
    if alive is not None:
        return NodeState.RUNNING if int(alive.get("active", 0)) > 0 else NodeState.IDLE
    if registration and registration.get("status") == NodeState.DOWN.value:
        return NodeState.DOWN
    return NodeState.UNKNOWN


@dataclass(frozen=True)
class NodeStatus:
    """One node as the ``nodes`` listing shows it."""

    rm: str
    node: str
    state: NodeState
    procs: int | None = None
    memory_mb: int | None = None
    disk_mb: int | None = None
    swap_mb: int | None = None
    features: tuple[str, ...] = ()
    last_heartbeat: float | None = None
    host: str | None = None
    active: int = 0
    source: str = "topology"  # where the resources come from: configured/detected/topology
    attributes: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["state"] = self.state.value
        data["features"] = list(self.features)
        return data


class NodeRegistry:
    """Reads and writes node registrations and heartbeats in one Redis database."""

    def __init__(self, client: redis.Redis, ttl: float) -> None:
        self.client = client
        self.ttl_ms = max(1, int(ttl * 1000))
        self._beat = client.register_script(HEARTBEAT_SCRIPT)
        self._beat_many = client.register_script(HEARTBEAT_MANY_SCRIPT)

    @classmethod
    def from_url(cls, url: str, ttl: float, *, settings: Any = None,
                 environ: Mapping[str, str] | None = None) -> "NodeRegistry":
        """A registry on the Redis at ``url``; TLS as :func:`connect_redis` decides."""
        # One quick retry: callers (heartbeat loop, CLI) retry or report themselves, and
        # redis-py's default backoff would make an unreachable server look like a hang.
        client = connect_redis(url, settings=settings, environ=environ,
                               socket_connect_timeout=2, socket_timeout=5,
                               retry=Retry(NoBackoff(), 1))
        return cls(client, ttl)

    @classmethod
    def for_daemon(cls, app: Any, settings: Any) -> "NodeRegistry":
        """The registry of the node daemon of ``app``, on its :func:`daemon_client`."""
        return cls(daemon_client(app, settings), settings.heartbeat_ttl)

    @classmethod
    def from_settings(cls, settings: Any) -> "NodeRegistry":
        """A registry on ``settings.redis_url`` with its heartbeat TTL and TLS options."""
        return cls.from_url(settings.redis_url, settings.heartbeat_ttl, settings=settings)

    def register(self, rm: str, node: str, resources: dict[str, Any],
                 facts: dict[str, Any], source: str, now: float) -> None:
        """Record (or refresh) a node's resources and host, and mark it alive."""
        mapping = {
            "resources": json.dumps(resources),
            "facts": json.dumps(facts),
            "source": source,
            "status": "Up",
            "registered_at": repr(now),
        }
        with _connectivity(self.client):
            pipe = self.client.pipeline()
            pipe.hset(node_key(rm, node), mapping=mapping)
            pipe.sadd(NODES_SET, f"{rm}/{node}")
            pipe.sadd(rm_nodes_key(rm), node)
            pipe.execute()
        self.heartbeat(rm, node, now, active=0)

    def heartbeat(self, rm: str, node: str, now: float, active: int = 0) -> bool:
        """Prove the node alive for one TTL more; True if it was not alive before
        (first beat, or back after its heartbeat expired): a node change.

        One script call (one command, one round trip): it runs on every node every
        interval, where a MULTI of three commands cost five."""
        payload = heartbeat_payload(now, active)
        with _connectivity(self.client):
            existed = self._beat(keys=[alive_key(rm, node), node_key(rm, node)],
                                 args=[payload, self.ttl_ms, repr(now)])
        return not existed

    def quiet_beat(self, rm: str, node: str) -> QuietBeat:
        """Unanswered heartbeats of one node (see :mod:`grid_tasks.node.quiet_beat`)."""
        return QuietBeat(self.client, QUIET_HEARTBEAT_SCRIPT, alive_key(rm, node),
                         node_key(rm, node), self.ttl_ms)

    def mark_down(self, rm: str, node: str, now: float) -> None:
        """A daemon's goodbye: the node shows Down at once rather than Unknown later."""
        with _connectivity(self.client):
            pipe = self.client.pipeline()
            pipe.delete(alive_key(rm, node))
            pipe.hset(node_key(rm, node), mapping={"status": NodeState.DOWN.value,
                                                   "stopped_at": repr(now)})
            pipe.execute()

    # -- many identities of one process (the scale harness): one round trip each -----
    def register_many(self, nodes: list[tuple[str, str, dict[str, Any]]],
                      facts: dict[str, Any], source: str, now: float) -> None:
        """:meth:`register` for every ``(rm, node, resources)``, pipelined."""
        with _connectivity(self.client):
            pipe = self.client.pipeline(transaction=False)
            for rm, node, resources in nodes:
                pipe.hset(node_key(rm, node), mapping={
                    "resources": json.dumps(resources), "facts": json.dumps(facts),
                    "source": source, "status": "Up", "registered_at": repr(now)})
                pipe.sadd(NODES_SET, f"{rm}/{node}")
                pipe.sadd(rm_nodes_key(rm), node)
            pipe.execute()
        self.heartbeat_many([(rm, node, 0) for rm, node, _ in nodes], now)

    def heartbeat_many(self, beats: list[tuple[str, str, int]], now: float
                       ) -> list[tuple[str, str]]:
        """:meth:`heartbeat` for every ``(rm, node, active)``, one script call per
        :data:`HEARTBEAT_CHUNK` nodes; the nodes that were not alive before (first
        beat, or back).  A harness beats for hundreds of identities every interval:
        three pipelined commands each cost it more CPU than everything else it does
        while idle."""
        revived: list[tuple[str, str]] = []
        idle = heartbeat_payload(now, 0)
        for first in range(0, len(beats), HEARTBEAT_CHUNK):
            chunk = beats[first:first + HEARTBEAT_CHUNK]
            keys = [key for rm, node, _ in chunk
                    for key in (alive_key(rm, node), node_key(rm, node))]
            args = [self.ttl_ms, repr(now)] + [
                heartbeat_payload(now, active) if active else idle
                for _, _, active in chunk]
            with _connectivity(self.client):
                numbers = self._beat_many(keys=keys, args=args)
            revived += [chunk[int(n) - 1][:2] for n in numbers]
        return revived

    def mark_down_many(self, nodes: list[tuple[str, str]], now: float) -> None:
        """:meth:`mark_down` for every ``(rm, node)``, pipelined."""
        with _connectivity(self.client):
            pipe = self.client.pipeline(transaction=False)
            for rm, node in nodes:
                pipe.delete(alive_key(rm, node))
                pipe.hset(node_key(rm, node), mapping={"status": NodeState.DOWN.value,
                                                       "stopped_at": repr(now)})
            pipe.execute()

    def status(self, rm: str, node: str) -> NodeStatus:
        """The current status of one node (Unknown if never registered)."""
        return self.statuses([(rm, node)])[0]

    def statuses(self, names: Iterable[tuple[str, str]]) -> list[NodeStatus]:
        names = list(names)
        with _connectivity(self.client):
            pipe = self.client.pipeline()
            for rm, node in names:
                pipe.hgetall(node_key(rm, node))
                pipe.get(alive_key(rm, node))
            raw = pipe.execute()
        return [_status(rm, node, _decode_hash(raw[2 * i]), _json(raw[2 * i + 1]))
                for i, (rm, node) in enumerate(names)]

    def states(self, names: Iterable[tuple[str, str]]) -> dict[tuple[str, str], NodeState]:
        """The state alone of each named node: its heartbeat and, for a node without
        one, the registration's status field - not the whole registration (resources,
        host facts) that :meth:`statuses` reads and decodes.

        Every iteration asks this of all its RM's nodes, so it is one ``MGET`` of the
        heartbeats plus one ``HGET`` per node found silent (usually none): two
        pipelined commands per node were a fifth of an idle iteration's CPU at 100
        nodes per RM (cProfile), and the node watch read them too."""
        names = list(names)
        if not names:
            return {}
        with _connectivity(self.client):
            beats = self.client.mget([alive_key(rm, node) for rm, node in names])
            silent = [name for name, beat in zip(names, beats) if beat is None]
            status = {}
            if silent:
                pipe = self.client.pipeline(transaction=False)
                for rm, node in silent:
                    pipe.hget(node_key(rm, node), "status")
                status = dict(zip(silent, pipe.execute()))
        out = {}
        for name, beat in zip(names, beats):
            raw = status.get(name)
            out[name] = node_state(_json(beat), {"status": raw.decode()} if raw else None)
        return out

    def silent(self, rm: str, names: str) -> dict[str, NodeState]:
        """Of ``rm``'s nodes ``names`` (one a line), those :meth:`states` finds without
        a heartbeat, with their state; one script call (:mod:`grid_tasks.node.silent`)."""
        return silent_nodes(self.client, PREFIX, rm, names)

    def node_names(self, rm: str) -> list[str]:
        """The nodes of ``rm`` ever registered (its own set: one RM's read does not grow
        with the other RMs' nodes), sorted.  Registrations older than that set are
        found in the grid-wide one while the RM's own is still empty."""
        with _connectivity(self.client):
            members = self.client.smembers(rm_nodes_key(rm))
            if not members:
                members = {m.split(b"/", 1)[1] for m in self.client.smembers(NODES_SET)
                           if m.split(b"/", 1)[0] == rm.encode()}
        return sorted(m.decode() for m in members)

    def list_nodes(self, topology: GridTopology | None = None,
                   rm: str | None = None) -> list[NodeStatus]:
        """Every registered node plus every node of ``topology``, sorted by rm and node;
        with ``rm``, that RM's only (its statuses alone are read: on a grid of 1,000
        nodes over 10 RMs a tenth of the round trip)."""
        if rm is not None:
            names = {(rm, node) for node in self.node_names(rm)}
        else:
            with _connectivity(self.client):
                members = {m.decode() for m in self.client.smembers(NODES_SET)}
            names = {tuple(m.split("/", 1)) for m in members}  # type: ignore[misc]
        if topology is not None:
            names |= {(n.rm, n.name) for n in topology.iter_nodes() if rm in (None, n.rm)}
        found = self.statuses(sorted(names))  # type: ignore[arg-type]
        if topology is None:
            return found
        return [_with_topology(s, topology) for s in found]

    def wait_alive(self, names: Iterable[tuple[str, str]], timeout: float,
                   poll: float = 0.05) -> list[NodeStatus]:
        """Block until every named node has a live heartbeat; return their statuses.

        Raises :class:`ConnectivityError` after ``timeout`` seconds naming the missing nodes.
        """
        names = list(names)
        deadline = time.monotonic() + timeout
        while True:
            found = self.statuses(names)
            missing = [f"{s.rm}/{s.node}" for s in found if s.last_heartbeat is None
                       or s.state in (NodeState.UNKNOWN, NodeState.DOWN)]
            if not missing:
                return found
            if time.monotonic() >= deadline:
                raise ConnectivityError(f"nodes did not register within {timeout:g} s: "
                                        + ", ".join(missing))
            time.sleep(poll)


def _with_topology(status: NodeStatus, topology: GridTopology) -> NodeStatus:
    """Fill resources of never-registered nodes from the topology."""
    if status.procs is not None or status.rm not in topology.rms:
        return status
    try:
        spec = topology.node(status.rm, status.node)
    except NotFoundError:  # registered but not configured: keep what Redis knows
        return status
    return NodeStatus(status.rm, status.node, status.state, spec.procs, spec.memory_mb,
                      spec.disk_mb, spec.swap_mb, spec.features, status.last_heartbeat,
                      status.host, status.active, "topology", dict(spec.attributes))


def _status(rm: str, node: str, reg: dict[str, str], alive: dict[str, Any] | None) -> NodeStatus:
    state = node_state(alive, reg or None)
    res = _json(reg.get("resources")) or {}
    facts = _json(reg.get("facts")) or {}
    last = alive.get("at") if alive else (float(reg["last_heartbeat"])
                                          if "last_heartbeat" in reg else None)
    return NodeStatus(
        rm, node, state,
        procs=res.get("procs"), memory_mb=res.get("memory_mb"), disk_mb=res.get("disk_mb"),
        swap_mb=res.get("swap_mb"), features=tuple(res.get("features", ())),
        last_heartbeat=last, host=facts.get("hostname"),
        active=int(alive.get("active", 0)) if alive else 0,
        source=reg.get("source", "topology"), attributes=dict(res.get("attributes", {})),
    )


def _decode_hash(raw: dict[bytes, bytes]) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in raw.items()}


def _json(raw: bytes | str | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None  # a foreign value under our key: treat as absent


_connectivity = connectivity  # the name broker code imported first
