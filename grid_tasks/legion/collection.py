"""Legion's collection: every resource of the grid with its attributes, queried in MIL.

Resources are the resource managers (``kind == "rm"``) and their nodes
(``kind == "node"``), named ``rm`` and ``rm/node``.  Attributes come from the topology
(see :mod:`grid_tasks.topology`) and, in a live collection, from the node registry
(registrations and heartbeats): ``state`` (Idle, Running, Down, Unknown), ``alive``,
``active`` (tasks running), ``host`` and ``last_heartbeat``.  An RM carries its own
attributes plus ``procs``/``memory``/``disk``/``swap`` summed over its nodes, ``nodes``,
``alive_nodes`` and the union of their ``features``.

Access restrictions (a resource's veto on who may use it) are topology attributes on an
RM (inherited by its nodes) or on a node (overriding the RM's)::

    [rm.rmA]
    allow_users = "alice, bob"        # user names (shell patterns allowed: "ops-*")
    allow_groups = "physics"          # any one of the requester's groups
    allow_hosts = "*.example.org"     # the submitting host (case-insensitive pattern)

Values are comma- or space-separated strings (the topology format holds scalars only).
A missing key means no restriction of that kind; when several are present a requester
must pass all of them.  Queries return only resources that admit the requester; an
anonymous requester (None) sees only unrestricted resources.

The collection itself is pure; :meth:`Collection.live` is the thin shell reading Redis.
"""

from __future__ import annotations

import fnmatch
import getpass
import os
import re
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from grid_tasks.errors import ConfigError
from grid_tasks.legion.tokens_model import ENACTED, Claim, enacted  # noqa: F401 - re-exported
from grid_tasks.mil import compile_query
from grid_tasks.node.registry import NodeRegistry, NodeStatus
from grid_tasks.settings import Settings
from grid_tasks.states import NodeState
from grid_tasks.topology import GridTopology, NodeSpec, load_topology
from grid_tasks.utc import epoch

ACCESS_KEYS = ("allow_users", "allow_groups", "allow_hosts")
_SPLIT = re.compile(r"[,\s]+")


class ResourceKind(str, Enum):
    RM = "rm"
    NODE = "node"


@dataclass(frozen=True)
class Requester:
    """Who asks: user, groups and submitting host (None/empty: unknown)."""

    user: str | None = None
    groups: tuple[str, ...] = ()
    host: str | None = None

    @classmethod
    def current(cls) -> "Requester":
        """The user running this process, their groups and this host."""
        groups: list[str] = []
        try:
            import grp

            for gid in os.getgroups():
                try:
                    groups.append(grp.getgrgid(gid).gr_name)
                except KeyError:
                    groups.append(str(gid))
        except ImportError:  # not on POSIX: no groups to offer
            pass
        return cls(getpass.getuser(), tuple(dict.fromkeys(groups)), socket.getfqdn())


@dataclass(frozen=True)
class Access:
    """Who a resource admits; None for a kind of restriction means anyone."""

    users: tuple[str, ...] | None = None
    groups: tuple[str, ...] | None = None
    hosts: tuple[str, ...] | None = None

    @classmethod
    def from_attributes(cls, attrs: Mapping[str, Any], where: str,
                        source: str = "<attributes>") -> "Access":
        """Read ``allow_*`` attributes; :class:`ConfigError` naming ``where`` if malformed."""
        found: dict[str, tuple[str, ...] | None] = {}
        for key in ACCESS_KEYS:
            value = attrs.get(key)
            if value is None:
                found[key] = None
                continue
            if not isinstance(value, str):
                raise ConfigError(f"{key} of {where} must be a comma-separated string, got "
                                  f"{value!r}", source=source, key=key)
            found[key] = tuple(v for v in _SPLIT.split(value.strip()) if v)
        return cls(found["allow_users"], found["allow_groups"], found["allow_hosts"])

    @property
    def restricted(self) -> bool:
        return any(v is not None for v in (self.users, self.groups, self.hosts))

    def admits(self, requester: Requester | None) -> bool:
        """True when ``requester`` passes every restriction present."""
        if not self.restricted:
            return True
        if requester is None:
            return False
        if self.users is not None and not _any_match([requester.user], self.users):
            return False
        if self.groups is not None and not _any_match(requester.groups, self.groups):
            return False
        if self.hosts is not None and not _any_match(
                [requester.host.lower() if requester.host else None],
                tuple(h.lower() for h in self.hosts)):
            return False
        return True


def _any_match(values: Iterable[str | None], patterns: tuple[str, ...]) -> bool:
    return any(v is not None and fnmatch.fnmatchcase(v, p) for v in values for p in patterns)


@dataclass(frozen=True)
class Resource:
    """One RM or node: its MIL attributes and who may use it."""

    kind: ResourceKind
    rm: str
    name: str
    attributes: Mapping[str, Any] = field(hash=False)
    access: Access = Access()

    @property
    def key(self) -> str:
        """``rm`` for an RM, ``rm/node`` for a node (the token store's resource name)."""
        return self.rm if self.kind is ResourceKind.RM else f"{self.rm}/{self.name}"

    def to_dict(self) -> dict[str, Any]:
        return dict(self.attributes)


_LIVE_KEYS = ("state", "alive", "active", "host", "last_heartbeat")


def _node_attributes(spec: NodeSpec | None, status: NodeStatus | None) -> dict[str, Any]:
    if spec is not None:
        attrs = spec.query_attributes()
    else:  # registered but not configured: what its daemon reported
        assert status is not None
        attrs = dict(status.attributes)
        attrs.update(name=status.node, rm=status.rm, procs=status.procs or 0,
                     memory=status.memory_mb or 0, disk=status.disk_mb or 0,
                     swap=status.swap_mb or 0, features=list(status.features))
    attrs["kind"] = ResourceKind.NODE.value
    if status is not None:
        attrs.update(state=status.state.value,
                     alive=status.state in (NodeState.IDLE, NodeState.RUNNING),
                     active=status.active, host=status.host,
                     last_heartbeat=status.last_heartbeat)
    return {k: v for k, v in attrs.items() if v is not None}


def _rm_attributes(name: str, own: Mapping[str, Any], nodes: list[Resource],
                   live: bool) -> dict[str, Any]:
    attrs = dict(own)
    features: dict[str, None] = {}
    for node in nodes:
        features.update(dict.fromkeys(node.attributes.get("features", ())))
    attrs.update(name=name, rm=name, kind=ResourceKind.RM.value, nodes=len(nodes),
                 features=list(features),
                 **{k: sum(int(n.attributes.get(k, 0)) for n in nodes)
                    for k in ("procs", "memory", "disk", "swap")})
    if live:
        attrs["alive_nodes"] = sum(1 for n in nodes if n.attributes.get("alive"))
    return attrs


class Collection:
    """Every resource of a grid; ``statuses`` (from the node registry) make it live."""

    def __init__(self, topology: GridTopology, statuses: Iterable[NodeStatus] | None = None,
                 *, source: str | None = None) -> None:
        self.topology = topology
        self.live = statuses is not None
        self.source = source or ("live" if self.live else topology.source)
        # RM restrictions first: a bad one is reported where it is written, not on a node
        rm_access = {rm: Access.from_attributes(spec.attributes, f"resource manager {rm}",
                                                topology.source)
                     for rm, spec in topology.rms.items()}
        by_name = {(s.rm, s.node): s for s in statuses or ()}
        nodes: dict[str, list[Resource]] = {rm: [] for rm in topology.rms}
        for spec in topology.iter_nodes():
            nodes[spec.rm].append(self._node(spec.rm, spec.name, spec,
                                             by_name.pop((spec.rm, spec.name), None),
                                             topology.source))
        for (rm, name), status in sorted(by_name.items()):  # registered, not configured
            nodes.setdefault(rm, []).append(self._node(rm, name, None, status, "registry"))
        self._resources: list[Resource] = []
        for rm, members in nodes.items():
            spec = topology.rms.get(rm)
            # who schedules it: "slurm" for a Slurm cluster, whose size only Slurm knows
            own = {**spec.attributes, "scheduler": spec.kind.value} if spec else {}
            self._resources.append(Resource(
                ResourceKind.RM, rm, rm, _rm_attributes(rm, own, members, self.live),
                rm_access.get(rm, Access())))
            self._resources.extend(members)

    @staticmethod
    def _node(rm: str, name: str, spec: NodeSpec | None, status: NodeStatus | None,
              source: str) -> Resource:
        attrs = _node_attributes(spec, status)
        return Resource(ResourceKind.NODE, rm, name, attrs,
                        Access.from_attributes(attrs, f"node {rm}/{name}", source))

    @classmethod
    def from_registry(cls, topology: GridTopology, registry: Any) -> "Collection":
        """A live collection from a :class:`~grid_tasks.node.registry.NodeRegistry`."""
        return cls(topology, registry.list_nodes(topology), source="live")

    @classmethod
    def live_from_settings(cls, settings: Settings,
                           topology: GridTopology | None = None) -> "Collection":
        """Read the topology file and the node registry named by ``settings``."""
        topology = topology or load_topology(settings.topology_file)
        registry = NodeRegistry.from_settings(settings)  # TLS and ACL as configured
        try:
            return cls.from_registry(topology, registry)
        finally:
            registry.client.close()

    def resources(self, kind: ResourceKind | str | None = None) -> list[Resource]:
        """All resources (RMs first, each followed by its nodes), optionally one kind."""
        if kind is None:
            return list(self._resources)
        kind = ResourceKind(kind)
        return [r for r in self._resources if r.kind is kind]

    def query(self, mil: str, requester: Requester | None = None, *,
              kind: ResourceKind | str | None = ResourceKind.NODE) -> list[Resource]:
        """QueryCollection: resources of ``kind`` that admit ``requester`` and match ``mil``.

        A malformed query raises :class:`~grid_tasks.mil.MILError` with its position.
        """
        predicate = compile_query(mil)
        return [r for r in self.resources(kind)
                if r.access.admits(requester) and predicate(r.attributes)]

    def capacities(self) -> dict[str, int]:
        """Processors per node resource (``rm/node``), for the token store."""
        return {r.key: int(r.attributes.get("procs", 0)) for r in self.resources("node")
                if int(r.attributes.get("procs", 0)) > 0}


# --- durable reservations (SQL) as token-store claims -------------------------------

def _epoch(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) else epoch(value)


def durable_claims(rows: Iterable[Any], capacities: Mapping[str, int]) -> list[Any]:
    """``(group, token ids, claims)`` for durable reservations, for :meth:`TokenStore.restore`.

    ``rows`` are reservation rows (:class:`grid_tasks.db.Reservation` or alike: ``rm``,
    ``name``, ``kind``, ``confirmed``, ``nodes``, ``resources``, ``start_time``,
    ``end_time``): administrative ones, confirmed job ones and confirmed grid ones whose
    enactment completed (:func:`enacted`) count; the others are only tokens (a half-made
    grid reservation must be pruned, not revived) and are left out.  Processors come from
    ``resources["procs_by_node"]``; a node listed without a count is held whole
    (its capacity).  Token ids are derived from the row, so restoring twice is harmless.
    """
    out = []
    for row in rows:
        kind = getattr(row.kind, "value", row.kind)
        if (kind != "admin" and not row.confirmed) or (kind == "grid" and not enacted(row)):
            continue
        by_node = dict((row.resources or {}).get("procs_by_node") or {})
        for node in row.nodes or ():
            by_node.setdefault(node, capacities.get(f"{row.rm}/{node}", 0))
        start, end = _epoch(row.start_time), _epoch(row.end_time)
        claims = [Claim(f"{row.rm}/{node}", start, end, int(procs))
                  for node, procs in sorted(by_node.items()) if int(procs) > 0 and end > start]
        if claims:
            group = f"sql.{row.rm}.{row.name}"
            out.append((group, [f"{group}#{c.resource}" for c in claims], claims))
    return out
