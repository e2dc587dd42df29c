"""Resource managers and nodes from the grid topology, and node heartbeats.

The topology is duck-typed (``grid_tasks.topology.GridTopology`` or anything
with the same attributes): ``topology.rms`` maps names to specs with ``name``,
``policy_file``, ``nodes`` and optionally ``attributes``; each node spec has
``name``, ``procs``, ``memory_mb``, ``disk_mb``, ``swap_mb``, ``features`` and
``attributes``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from grid_tasks.errors import NotFoundError
from grid_tasks.states import NodeState

from .errors import RecordError
from .models import Node, ResourceManager

_COUNTS = ("procs", "memory_mb", "disk_mb", "swap_mb")
_MAX_COUNT = 2**31 - 1  # the columns are 32-bit integers on PostgreSQL
#: The keys a node may report in ``record_node_seen``.
RESOURCE_KEYS = frozenset(_COUNTS + ("features", "attributes"))
# States a heartbeat ends: the node is evidently up again.  Drained stays drained
# (an operator's decision) and Busy/Running are the scheduler's to set.
_REVIVED_BY_HEARTBEAT = (NodeState.UNKNOWN, NodeState.DOWN)


@dataclass
class SyncReport:
    """What :func:`sync_topology` changed, by ``rm/node`` name."""

    added_rms: list[str] = field(default_factory=list)
    added_nodes: list[str] = field(default_factory=list)
    updated_nodes: list[str] = field(default_factory=list)
    removed_nodes: list[str] = field(default_factory=list)
    #: RMs in the database but not in the topology: kept, since jobs refer to them.
    stale_rms: list[str] = field(default_factory=list)


def _count(where: str, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_COUNT:
        raise RecordError(f"{where}: {key} must be a non-negative integer, got {value!r}")
    return value


def _features(where: str, value: Any) -> list[str]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(f, str) for f in value):
        raise RecordError(f"{where}: features must be a list of strings, got {value!r}")
    return list(value)


def _attributes(where: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise RecordError(f"{where}: attributes must be a mapping with string keys, "
                          f"got {value!r}")
    try:
        json.dumps(dict(value), allow_nan=False)
    except (TypeError, ValueError) as err:
        raise RecordError(f"{where}: attributes must be plain JSON values ({err})") from None
    return dict(value)


def _validated(where: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """Check resource values; RecordError naming the node and key otherwise."""
    unknown = sorted(set(values) - RESOURCE_KEYS)
    if unknown:
        raise RecordError(f"{where}: unknown resource key(s) {', '.join(map(repr, unknown))} "
                          f"(expected {', '.join(sorted(RESOURCE_KEYS))})")
    clean: dict[str, Any] = {}
    for key, value in values.items():
        if key in _COUNTS:
            clean[key] = _count(where, key, value)
        elif key == "features":
            clean[key] = _features(where, value)
        else:
            clean[key] = _attributes(where, value)
    return clean


def _spec_resources(spec: Any) -> dict[str, Any]:
    return {
        "procs": spec.procs,
        "memory_mb": spec.memory_mb,
        "disk_mb": spec.disk_mb,
        "swap_mb": spec.swap_mb,
        "features": list(spec.features),
        "attributes": dict(spec.attributes),
    }


def _sync_rm(session: Session, spec: Any, report: SyncReport) -> None:
    rm = session.get(ResourceManager, spec.name)
    if rm is None:
        rm = ResourceManager(name=spec.name)
        session.add(rm)
        report.added_rms.append(spec.name)
    rm.policy_file = str(spec.policy_file) if spec.policy_file is not None else None
    rm.attributes = dict(getattr(spec, "attributes", None) or {})
    existing = {node.name: node for node in rm.nodes}
    wanted, added = set(), []
    for node_spec in spec.nodes:
        where = f"{spec.name}/{node_spec.name}"
        values = _validated(where, _spec_resources(node_spec))
        wanted.add(node_spec.name)
        node = existing.get(node_spec.name)
        if node is None:
            added.append({"rm": spec.name, "name": node_spec.name,
                          "state": NodeState.UNKNOWN, **values})
            report.added_nodes.append(where)
        elif any(getattr(node, k) != v for k, v in values.items()):
            for key, value in values.items():
                setattr(node, key, value)
            report.updated_nodes.append(where)
    for name, node in existing.items():
        if name not in wanted:
            rm.nodes.remove(node)  # delete-orphan: configuration, nothing refers to it
            report.removed_nodes.append(f"{spec.name}/{name}")
    if added:  # one bulk INSERT: a new grid of N nodes costs no N ORM objects
        session.flush()  # the RM row first (the nodes' foreign key)
        session.execute(insert(Node), added)
        session.expire(rm, ["nodes"])  # read again with the new rows when next used


def sync_topology(session: Session, topology: Any) -> SyncReport:
    """Upsert the topology's resource managers and nodes; returns what changed.

    Nodes no longer configured are deleted; resource managers no longer
    configured are kept (jobs and accounting refer to them) and reported.
    New nodes start ``Unknown`` until their daemon is heard from.
    """
    report = SyncReport()
    for spec in topology.rms.values():
        _sync_rm(session, spec, report)
    names = set(topology.rms)
    report.stale_rms = sorted(
        name for name in session.scalars(select(ResourceManager.name)) if name not in names
    )
    session.flush()
    return report


def get_node(session: Session, rm: str, node: str) -> Node:
    """The node ``node`` of ``rm``; NotFoundError naming what is unknown."""
    found = session.scalars(select(Node).where(Node.rm == rm, Node.name == node)).first()
    if found is not None:
        return found
    if session.get(ResourceManager, rm) is None:
        known = ", ".join(session.scalars(select(ResourceManager.name).order_by("name")))
        raise NotFoundError(f"unknown resource manager {rm!r} (known: {known or 'none'})")
    known = ", ".join(session.scalars(select(Node.name).where(Node.rm == rm).order_by("name")))
    raise NotFoundError(f"unknown node {node!r} in resource manager {rm!r} "
                        f"(known: {known or 'none'})")


def record_node_seen(
    session: Session, rm: str, node: str, resources: Mapping[str, Any], when: datetime
) -> Node:
    """Store a node daemon's registration or heartbeat with the resources it reports.

    ``resources`` holds any of :data:`RESOURCE_KEYS` (as
    ``NodeSpec.resources()`` returns them).  The first report sets
    ``registered_at``; ``last_seen`` never moves backwards, so late, reordered
    heartbeats are harmless.  An Unknown or Down node becomes Idle.
    """
    row = get_node(session, rm, node)
    for key, value in _validated(f"{rm}/{node}", resources).items():
        setattr(row, key, value)
    if row.registered_at is None:
        row.registered_at = when
    if row.last_seen is None or when > row.last_seen:
        row.last_seen = when
    if row.state in _REVIVED_BY_HEARTBEAT:
        row.state = NodeState.IDLE
    session.flush()
    return row
