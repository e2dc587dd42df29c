"""An RM's node list as the scheduler plans with it, kept per process between iterations.

Every iteration (the gatekeeper's quick pass for each submission, the scheduler's full
ones) builds its Maui core from the RM's node rows and asks the registry which nodes are
silent.  Read and decoded afresh each time, both grow with the nodes of the RM: at 100
nodes a row read and a heartbeat read per node were most of what an iteration spent
beyond a 10-node RM's.  So:

* the node rows are kept while the RM's change counter (``node_changes``, bumped by
  triggers on ``nodes`` in every writer's transaction: migration 0006) is the one read
  with them; the counter is read first, so a kept list is never older than its counter;
* the names go to the registry once joined (:meth:`NodeTable.silent`), and only the
  nodes without a live heartbeat come back (:meth:`NodeRegistry.silent`): Redis checks
  the keys, this process decodes none.

The core gets the kept :class:`~grid_tasks.maui.nodeset.NodeSet`: its schedulers answer
for the nodes nothing touches per class of like nodes (:mod:`grid_tasks.maui.fresh`),
and copy a node before changing its state.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from grid_tasks.db.models import Node as NodeRow
from grid_tasks.db.models import NodeChanges
from grid_tasks.maui import Node
from grid_tasks.maui.nodeset import NodeSet
from grid_tasks.states import NodeState

_CHANGES = select(NodeChanges.changes).where(NodeChanges.rm == bindparam("rm"))
_NODES = select(NodeRow.name, NodeRow.procs, NodeRow.memory_mb, NodeRow.disk_mb,
                NodeRow.swap_mb, NodeRow.features).where(
    NodeRow.rm == bindparam("rm")).order_by(NodeRow.name)
#: Marks "no counter row yet" (no node written since migration 0006): a version too.
_NO_ROW = -1


@dataclass(frozen=True)
class NodeTable:
    """The node rows of one RM at one value of its change counter."""

    rm: str
    changes: int
    templates: tuple[Node, ...]
    names: str  # the node names, one a line: the registry's script argument
    #: the same nodes as the core's shared node set (never changed: a scheduler
    #: over it copies a node before changing its state)
    nodeset: NodeSet

    @classmethod
    def from_rows(cls, rm: str, changes: int, rows: Any) -> "NodeTable":
        nodes = tuple(Node(r.name, r.procs, r.memory_mb or 0, r.disk_mb or 0, r.swap_mb or 0,
                           frozenset(r.features or ())) for r in rows)
        return cls(rm, changes, nodes, "\n".join(n.name for n in nodes),
                   NodeSet.of(n.copy() for n in nodes))

    def nodes(self) -> list[Node]:
        """Fresh copies of the nodes, in name order."""
        return [n.copy() for n in self.templates]

    def silent(self, registry: Any) -> dict[str, NodeState]:
        """The nodes without a live heartbeat, with their state (Down or Unknown)."""
        if not self.templates:
            return {}
        return registry.silent(self.rm, self.names)


#: Per engine (a database emptied and made again gets a new engine from
#: ``dispose_engines``/``get_engine``, and so no list of the old one), per RM.
_kept: "weakref.WeakKeyDictionary[Any, dict[str, NodeTable]]" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def node_table(session: Session, rm: str) -> NodeTable:
    """``rm``'s node list: the kept one while its change counter stands, else read."""
    conn = session.connection()
    changes = conn.scalar(_CHANGES, {"rm": rm})
    changes = _NO_ROW if changes is None else int(changes)
    bind = session.get_bind()
    kept = _kept.get(bind, {}).get(rm)
    if kept is not None and kept.changes == changes:
        return kept
    table = NodeTable.from_rows(rm, changes, conn.execute(_NODES, {"rm": rm}))
    with _lock:
        _kept.setdefault(bind, {})[rm] = table
    return table


def forget() -> None:
    """Drop every kept node list (tests)."""
    with _lock:
        _kept.clear()


__all__ = ["NodeTable", "forget", "node_table"]
