"""The grid topology: resource managers and their nodes, from a TOML file.

Layout (memory, disk and swap in megabytes; unknown keys are free-form
attributes usable in MIL queries, except those so close to a known key that they are
surely misspelt, such as ``memroy_mb``; RM-level attributes are inherited by its nodes)::

    [rm.rmA]
    policy_file = "maui.cfg"          # relative to this file
    scheduler = "own"                 # optional: its iterations in a process of their own
    site = "north"

    [rm.rmA.node.node1]
    procs = 4
    memory_mb = 8192
    disk_mb = 100000
    swap_mb = 2048
    features = ["fast", "ib"]
    arch = "x86_64"
    os = "linux"

    [rm.rmA.node."n[001-100]"]         # a range: 100 identical nodes n001 ... n100
    procs = 8

A Slurm cluster is a resource manager of its own kind: Slurm schedules it and knows
its nodes, so its table names how to reach it instead of listing nodes::

    [rm.slurmA]
    kind = "slurm"
    slurm_conf = "/etc/slurm/slurm.conf"   # SLURM_CONF of its client commands
    partition = "batch"                     # optional: Slurm's default partition
    account = "grid"                        # optional: the Slurm account charged
    output_dir = "/shared/grid-output"      # optional: jobs' streams (default: temp folder)

Node names are unique across the whole grid: a host belongs to one cluster,
and counting it twice would overcommit it.  Malformed files raise
:class:`~grid_tasks.errors.ConfigError` naming the file, line and key.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any

from grid_tasks.errors import ConfigError, NotFoundError
from grid_tasks.hostlist import HostlistError, compress, expand
from grid_tasks.tomlpos import hostile_value_error, locate_key, syntax_error

__all__ = ["GridTopology", "NodeSpec", "RMKind", "ResourceManagerSpec", "SchedulerPlacement",
           "SlurmSpec", "load_topology", "locate_key", "parse_topology"]

AttrValue = str | int | float | bool

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
RESOURCE_KEYS = ("procs", "memory_mb", "disk_mb", "swap_mb")
#: Resource counts land in 32-bit SQL INTEGER columns (PostgreSQL's int4).
RESOURCE_MAX = 2**31 - 1
RESERVED_ATTRS = frozenset({"name", "rm", "procs", "memory", "disk", "swap", "features"})
#: The keys the schema gives a meaning to, per table.  Any other key is a free attribute,
#: unless it is so close to one of these that it is surely a misspelling of it.
NODE_KEYS = (*RESOURCE_KEYS, "features")
RM_KEYS = ("policy_file", "node", "kind", "scheduler")
SLURM_KEYS = ("slurm_conf", "partition", "account", "output_dir")
#: How alike (difflib's ratio) a free attribute may be to a schema key before it is
#: taken for a typo: catches memroy_mb, feature, polcy_file; spares arch, os, gpus, site.
TYPO_CUTOFF = 0.8


@dataclass(frozen=True)
class NodeSpec:
    """One compute node as configured: its resources, features and attributes."""

    name: str
    rm: str
    procs: int
    memory_mb: int = 0
    disk_mb: int = 0
    swap_mb: int = 0
    features: tuple[str, ...] = ()
    # left out of the hash (mappings are unhashable) so specs can key dicts and sets
    attributes: Mapping[str, AttrValue] = field(default_factory=dict, hash=False)

    def query_attributes(self) -> dict[str, object]:
        """A flat attribute map for MIL queries (free-form attributes included)."""
        attrs: dict[str, object] = dict(self.attributes)
        attrs.update(name=self.name, rm=self.rm, procs=self.procs, memory=self.memory_mb,
                     disk=self.disk_mb, swap=self.swap_mb, features=list(self.features))
        return attrs

    def resources(self) -> dict[str, object]:
        """The configured resources, as a node daemon registers them."""
        return {"procs": self.procs, "memory_mb": self.memory_mb, "disk_mb": self.disk_mb,
                "swap_mb": self.swap_mb, "features": list(self.features),
                "attributes": dict(self.attributes)}


class RMKind(str, Enum):
    """Who schedules a resource manager: grid_tasks' own Maui core on its node daemons,
    or a Slurm cluster's controller."""

    MAUI = "maui"
    SLURM = "slurm"


class SchedulerPlacement(str, Enum):
    """Where a Maui RM's iterations run: on the shared scheduler workers, or in a process
    of their own (``grid-tasks worker --iterations RM``), as a real site runs one Maui
    per cluster: a deep queue's costly iterations then slow no other RM (issue 25)."""

    SHARED = "shared"
    OWN = "own"


@dataclass(frozen=True)
class SlurmSpec:
    """How to reach a Slurm cluster: its configuration (selects controller and ports for
    the client commands), the partition and the Slurm account to use (Slurm's defaults
    when None)."""

    slurm_conf: Path
    partition: str | None = None
    account: str | None = None
    #: where jobs' streams go when their RSL names none (None: the system's temp folder);
    #: the compute nodes and the gatekeeper must both reach it
    output_dir: Path | None = None


@dataclass(frozen=True)
class ResourceManagerSpec:
    """A resource manager (cluster): its policy file and its nodes, or for a Slurm
    cluster how to reach it (its nodes are Slurm's)."""

    name: str
    policy_file: Path | None
    nodes: tuple[NodeSpec, ...]
    attributes: Mapping[str, AttrValue] = field(default_factory=dict, hash=False)
    kind: RMKind = RMKind.MAUI
    slurm: SlurmSpec | None = None
    scheduler: SchedulerPlacement = SchedulerPlacement.SHARED

    @cached_property
    def _by_name(self) -> dict[str, NodeSpec]:
        return {node.name: node for node in self.nodes}

    def node(self, name: str) -> NodeSpec:
        """The node called ``name``; :class:`NotFoundError` if it is not in this RM
        (a dictionary look-up: a harness of 1,000 identities looks each one up)."""
        found = self._by_name.get(name)
        if found is not None:
            return found
        names = [n.name for n in self.nodes]
        # a large RM's names in their short form (n[001-100]), a small one's spelled out
        known = (compress(names) if len(names) > 10 else ", ".join(names)) or "none"
        raise NotFoundError(f"unknown node {name!r} in resource manager {self.name!r} "
                            f"(known: {known})")


@dataclass(frozen=True)
class GridTopology:
    """All resource managers of a grid, as read from ``source``."""

    source: str
    rms: Mapping[str, ResourceManagerSpec] = field(hash=False)

    def rm(self, name: str) -> ResourceManagerSpec:
        """The resource manager called ``name``; :class:`NotFoundError` if unknown."""
        try:
            return self.rms[name]
        except KeyError:
            known = ", ".join(self.rms) or "none"
            raise NotFoundError(f"unknown resource manager {name!r} in {self.source} "
                                f"(known: {known})") from None

    def node(self, rm: str, name: str) -> NodeSpec:
        """The node ``name`` of resource manager ``rm``; :class:`NotFoundError` if unknown."""
        return self.rm(rm).node(name)

    def of_kind(self, kind: RMKind) -> list[ResourceManagerSpec]:
        """The resource managers of one kind, in file order."""
        return [spec for spec in self.rms.values() if spec.kind is kind]

    def iterations(self, placement: SchedulerPlacement) -> list[str]:
        """The RMs whose iterations run at ``placement``, in file order (a Slurm
        cluster's, no-ops that beat still sends, on the shared workers)."""
        return [name for name, spec in self.rms.items() if spec.scheduler is placement]

    def iter_nodes(self) -> Iterator[NodeSpec]:
        """Every node of every resource manager, in file order."""
        for spec in self.rms.values():
            yield from spec.nodes

    def check_policy_files(self) -> None:
        """Refuse a topology whose RM names a policy file that is not there.

        Loading does not check it (``query --grid`` only reads the nodes); a grid
        started on it would never schedule, every iteration failing on the missing
        file, so ``up`` and the scheduler and gatekeeper workers call this first.
        The error names the path as resolved against the topology file's folder."""
        for spec in self.rms.values():
            if spec.policy_file is None or spec.policy_file.is_file():
                continue
            path = ("rm", spec.name, "policy_file")
            try:
                text = Path(self.source).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                text = None
            line, column = locate_key(text, path) if text else (None, None)
            where = "does not exist" if not spec.policy_file.exists() else "is not a file"
            raise ConfigError(f"policy file {spec.policy_file.resolve()} {where} (resource "
                              f"manager {spec.name!r}; policy_file resolves against the "
                              f"topology file's folder)", source=self.source, line=line,
                              column=column, key=".".join(path), text=text)


def load_topology(path: str | Path) -> GridTopology:
    """Read and validate a topology file; :class:`ConfigError` if unreadable or malformed."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("topology file not found", source=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read topology file: {exc}", source=str(path)) from None
    return parse_topology(text, str(path), base_dir=path.parent)


def parse_topology(text: str, source: str = "<string>",
                   base_dir: Path | None = None) -> GridTopology:
    """Parse topology TOML ``text``; relative policy paths resolve against ``base_dir``."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise syntax_error(exc, text, source) from None
    except (RecursionError, ValueError) as exc:
        # tomllib recurses once per nesting level and calls int() on decimal literals,
        # so hostile files escape as these two; find the culprit ourselves.
        raise hostile_value_error(exc, text, source) from None
    return _Builder(text, source, base_dir or Path(".")).build(data)


class _Builder:
    """Turns parsed TOML into specs, locating each semantic error in the text."""

    def __init__(self, text: str, source: str, base_dir: Path) -> None:
        self.text = text
        self.source = source
        self.base_dir = base_dir
        self.seen_nodes: dict[str, str] = {}

    def error(self, message: str, path: tuple[str, ...]) -> ConfigError:
        line, column = locate_key(self.text, path)
        return ConfigError(message, source=self.source, line=line, column=column,
                           key=".".join(path), text=self.text)

    def build(self, data: dict[str, Any]) -> GridTopology:
        for key in data:
            if key != "rm":
                raise self.error(f"unknown top-level key {key!r} (expected [rm.<name>] tables)",
                                 (key,))
        rms = data.get("rm")
        if not isinstance(rms, dict) or not rms:
            raise self.error("no resource managers: add at least one [rm.<name>] table", ("rm",))
        specs = {name: self.build_rm(name, body) for name, body in rms.items()}
        return GridTopology(self.source, MappingProxyType(specs))

    def check_name(self, name: str, what: str, path: tuple[str, ...]) -> None:
        if not NAME_RE.match(name):
            raise self.error(f"invalid {what} name {name!r}: use letters, digits, '_' and '-' "
                             "(names become queue names)", path)

    def build_rm(self, name: str, body: Any) -> ResourceManagerSpec:
        path = ("rm", name)
        self.check_name(name, "resource manager", path)
        if not isinstance(body, dict):
            raise self.error(f"resource manager {name!r} must be a table", path)
        kind = self.kind(body.get("kind", RMKind.MAUI.value), path + ("kind",))
        if kind is RMKind.SLURM:
            return self.build_slurm(name, body)
        policy = body.get("policy_file")
        if policy is not None and (not isinstance(policy, str) or not policy):
            raise self.error("policy_file must be a non-empty string path", path + ("policy_file",))
        nodes_body = body.get("node", {})
        if not isinstance(nodes_body, dict):
            raise self.error("'node' must hold [rm.<rm>.node.<name>] tables", path + ("node",))
        for key in body:
            if key in RESOURCE_KEYS or key == "features":
                raise self.error(f"{key!r} belongs to a node: set it in [rm.{name}.node.<name>] "
                                 "(resource manager attributes are inherited as free "
                                 "attributes, not as resources)", path + (key,))
            if key in SLURM_KEYS:
                raise self.error(f"{key!r} is for a Slurm cluster: add kind = \"slurm\"",
                                 path + (key,))
        attrs = self.attributes(body, path, skip=set(RM_KEYS), schema=RM_KEYS + NODE_KEYS)
        nodes = tuple(self.build_node(name, n, b, attrs, key) for key, b in nodes_body.items()
                      for n in self.node_names(name, key))
        if not nodes:
            raise self.error(f"resource manager {name!r} has no nodes", path)
        policy_path = None if policy is None else self._resolve(policy)
        placement = self.choice(SchedulerPlacement, body.get("scheduler", "shared"),
                                path + ("scheduler",))
        return ResourceManagerSpec(name, policy_path, nodes, MappingProxyType(attrs),
                                   scheduler=placement)

    def kind(self, value: Any, path: tuple[str, ...]) -> RMKind:
        return self.choice(RMKind, value, path)

    def choice(self, enum: type[Any], value: Any, path: tuple[str, ...]) -> Any:
        """``value`` as a member of the string enum ``enum``; else an error naming them."""
        try:
            return enum(value)
        except ValueError:
            allowed = ", ".join(repr(k.value) for k in enum)
            raise self.error(f"{path[-1]} must be one of {allowed}, got {value!r}",
                             path) from None

    def build_slurm(self, name: str, body: dict[str, Any]) -> ResourceManagerSpec:
        """A Slurm cluster: how to reach it; nodes and a policy file are Slurm's own."""
        path = ("rm", name)
        for key in ("node", "policy_file", "scheduler", *RESOURCE_KEYS, "features"):
            if key in body:
                raise self.error(f"{key!r} does not apply to a Slurm cluster: Slurm knows its "
                                 "nodes and schedules them itself", path + (key,))
        conf = body.get("slurm_conf")
        if not isinstance(conf, str) or not conf:
            raise self.error(f"Slurm cluster {name!r} needs slurm_conf (the path of its "
                             "slurm.conf, as SLURM_CONF)", path + ("slurm_conf",))
        texts = {}
        for key in ("partition", "account"):
            value = body.get(key)
            if value is not None and (not isinstance(value, str) or not NAME_RE.match(value)):
                raise self.error(f"{key} must be a Slurm name (letters, digits, '_', '-')",
                                 path + (key,))
            texts[key] = value
        attrs = self.attributes(body, path, skip={"kind", *SLURM_KEYS},
                                schema=RM_KEYS + SLURM_KEYS + NODE_KEYS)
        out = body.get("output_dir")
        if out is not None and (not isinstance(out, str) or not out):
            raise self.error("output_dir must be a non-empty string path", path + ("output_dir",))
        spec = SlurmSpec(self._resolve(conf), texts["partition"], texts["account"],
                         None if out is None else self._resolve(out))
        return ResourceManagerSpec(name, None, (), MappingProxyType(attrs), RMKind.SLURM, spec)

    def _resolve(self, policy: str) -> Path:
        p = Path(policy).expanduser()
        return p if p.is_absolute() else self.base_dir / p

    def node_names(self, rm: str, key: str) -> list[str]:
        """The node names of table ``key``: one, or a range such as ``n[001-100]``
        (a large cluster's identical nodes in one table)."""
        if "[" not in key:
            return [key]
        try:
            return expand(key)
        except HostlistError as exc:
            raise self.error(str(exc), ("rm", rm, "node", key)) from None

    def build_node(self, rm: str, name: str, body: Any,
                   inherited: Mapping[str, AttrValue], key: str | None = None) -> NodeSpec:
        path = ("rm", rm, "node", key or name)
        self.check_name(name, "node", path)
        if not isinstance(body, dict):
            raise self.error(f"node {name!r} must be a table", path)
        if name in self.seen_nodes:
            raise self.error(f"duplicate node name {name!r} (already in resource manager "
                             f"{self.seen_nodes[name]!r}; node names are grid-wide)", path)
        self.seen_nodes[name] = rm
        if "procs" not in body:
            raise self.error(f"node {name!r} needs 'procs' (number of processors)", path)
        res = {k: self.count(body.get(k, 0), path + (k,), minimum=1 if k == "procs" else 0)
               for k in RESOURCE_KEYS}
        features = self.features(body.get("features", []), path + ("features",))
        attrs = dict(inherited)
        attrs.update(self.attributes(body, path, skip=set(NODE_KEYS), schema=NODE_KEYS))
        return NodeSpec(name, rm, res["procs"], res["memory_mb"], res["disk_mb"],
                        res["swap_mb"], features, MappingProxyType(attrs))

    def count(self, value: Any, path: tuple[str, ...], minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(f"{path[-1]} must be a whole number, got {value!r}", path)
        if value < minimum:
            raise self.error(f"{path[-1]} must be at least {minimum}, got {value}", path)
        if value > RESOURCE_MAX:
            raise self.error(f"{path[-1]} must be at most {RESOURCE_MAX}, got {value}", path)
        return value

    def features(self, value: Any, path: tuple[str, ...]) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(f, str) and f for f in value):
            raise self.error("features must be a list of non-empty strings", path)
        return tuple(value)

    def attributes(self, body: dict[str, Any], path: tuple[str, ...], skip: set[str],
                   schema: tuple[str, ...]) -> dict[str, AttrValue]:
        attrs: dict[str, AttrValue] = {}
        for key, value in body.items():
            if key in skip:
                continue
            if key in RESERVED_ATTRS:
                raise self.error(f"attribute {key!r} is reserved (use memory_mb, disk_mb, "
                                 "swap_mb, features)", path + (key,))
            self.refuse_typo(key, path, schema)
            if not isinstance(value, (str, int, float, bool)):
                raise self.error(f"attribute {key!r} must be a string, number or boolean, "
                                 f"got {type(value).__name__}", path + (key,))
            if isinstance(value, int) and not -2**63 <= value < 2**63:
                raise self.error(f"attribute {key!r} is out of range (TOML integers are "
                                 "64-bit)", path + (key,))
            attrs[key] = value
        return attrs

    def refuse_typo(self, key: str, path: tuple[str, ...], schema: tuple[str, ...]) -> None:
        """A free attribute that looks like a schema key would silently drop the setting
        (``memroy_mb`` leaves the node with 0 MB): refuse it, naming the likely key."""
        close = difflib.get_close_matches(key.lower(), schema, n=1, cutoff=TYPO_CUTOFF)
        if close:
            where = "node" if path[-2:-1] == ("node",) else "resource manager"
            raise self.error(f"unknown {where} key {key!r}: did you mean {close[0]}? (free "
                             f"attributes may not look like a known key)", path + (key,))
