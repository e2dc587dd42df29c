"""A cluster's configured nodes, shared by every scheduler built over them.

A live RM builds a fresh scheduler for every iteration (the gatekeeper's quick pass
for each submission, the scheduler worker's full ones), and nearly all of its nodes
are *fresh* there: no running job, reservation or state change touches them, so each
offers its whole configuration.  Building a profile per node per dimension, summing
every node into the free-processors curve, and testing every node for every job made
an iteration's cost grow with the nodes even when one job starts on one of them.

A :class:`NodeSet` is made once per node list (it is immutable: its nodes are never
changed) and groups the nodes into :class:`NodeClass` es of interchangeable nodes:
same resources, features, measured use, load and priority.  Within a class only the
node index tells nodes apart, so what the engine asks of fresh nodes it answers per
class (how many, what each offers) and, for an allocation, from the first few members
in index order (:mod:`grid_tasks.maui.fresh`).  The engine materialises a node - its
own profiles, and its own :class:`Node` copy before a state change - the first time
anything looks at it individually; from then on it takes the general path.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from grid_tasks.maui.model import Job, Node, SchedulerError
from grid_tasks.maui.policies.metric import machine_totals


@dataclass(frozen=True)
class NodeClass:
    """Interchangeable usable nodes: ``members`` in index order, ``sample`` one of them."""

    number: int
    sample: Node
    members: tuple[str, ...]


def _class_key(node: Node) -> tuple:
    return (node.procs, node.memory, node.disk, node.swap, node.features,
            node.utilized_procs, node.utilized_memory, node.load, node.priority)


def _dims(node: Node) -> tuple[int, int, int, int]:
    return (node.procs, node.memory, node.disk, node.swap)


@dataclass
class NodeSet:
    """Immutable nodes of a cluster with their classes and per-shape answers (cached)."""

    nodes: dict[str, Node]
    index: dict[str, int]
    classes: tuple[NodeClass, ...]
    #: class number of each usable node (unusable ones are in no class)
    class_of: dict[str, int]
    _eligible: dict[tuple, tuple[NodeClass, ...]] = field(default_factory=dict)
    _ever: dict[tuple, int] = field(default_factory=dict)
    _machine: tuple[float, float, float, float] | None = None

    @classmethod
    def of(cls, nodes: Iterable[Node]) -> "NodeSet":
        """The set of ``nodes`` (taken over: the caller must not change them after)."""
        table: dict[str, Node] = {}
        groups: dict[tuple, list[str]] = {}
        for node in nodes:
            if node.name in table:
                raise SchedulerError(f"node {node.name} already exists")
            table[node.name] = node
            if node.usable:
                groups.setdefault(_class_key(node), []).append(node.name)
        classes = tuple(NodeClass(i, table[names[0]], tuple(names))
                        for i, names in enumerate(groups.values()))
        return cls(table, {name: i for i, name in enumerate(table)}, classes,
                   {name: c.number for c in classes for name in c.members})

    def __len__(self) -> int:
        return len(self.nodes)

    def machine(self) -> tuple[float, float, float, float]:
        """Configured processors, memory, disk and swap of every node (cached)."""
        if self._machine is None:
            self._machine = machine_totals(list(self.nodes.values()))
        return self._machine

    def eligible_classes(self, job: Job) -> tuple[NodeClass, ...]:
        """Classes whose nodes have the job's features and room for one of its tasks."""
        demand = job.task_demand()
        key = (demand, job.features)
        hit = self._eligible.get(key)
        if hit is None:
            hit = self._eligible[key] = tuple(
                c for c in self.classes if job.features <= c.sample.features
                and not any(d > cap for d, cap in zip(demand, _dims(c.sample)) if d))
        return hit

    def tasks_ever(self, job: Job, node: Node) -> int:
        """Tasks of ``job`` ``node`` could hold were it empty (``_can_ever_fit``'s term)."""
        cap = min((c // d for d, c in zip(job.task_demand(), _dims(node)) if d),
                  default=job.tasks)
        return min(cap, job.tasks_per_node or cap)

    def ever_total(self, job: Job) -> int:
        """:meth:`tasks_ever` summed over every usable eligible node of the set (cached
        per shape)."""
        key = (job.tasks, job.task_demand(), job.tasks_per_node, job.features)
        hit = self._ever.get(key)
        if hit is None:
            hit = self._ever[key] = sum(len(c.members) * self.tasks_ever(job, c.sample)
                                        for c in self.eligible_classes(job))
        return hit


__all__ = ["NodeClass", "NodeSet"]
