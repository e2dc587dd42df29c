"""The placement engine over a :class:`~grid_tasks.maui.nodeset.NodeSet`: fresh nodes
answered per class, the others one by one (a mixin of :class:`Engine`).

A node is *fresh* while nothing has looked at it individually: it has no profiles of
its own (``name not in engine.prof``) and is the set's own, unchanged node.  Its
profiles would be constant at its configuration, it lies in no hold and no placement
uses it, so:

* the free-processors curve counts the fresh nodes of each class as one sum
  (:meth:`FreshMixin.fresh_free`), and takes a node in by itself when it is
  materialised (:meth:`~grid_tasks.maui.capacity.CapacityCurve.adopt`);
* "could it ever fit" is the set's per-shape total, corrected for the nodes the engine
  changed (:meth:`FreshMixin.ever_fits`);
* a start-now allocation (:meth:`FreshMixin.fit_split`) weighs every materialised
  node as :meth:`Engine._alloc_at` does and, of each eligible class, the first
  ``tasks`` fresh members in the allocation policy's order with the capacity the class
  offers.  Every policy orders a class's members by index alone (LASTAVAILABLE by
  descending index: their free windows never close), and PACK and ROUNDROBIN give
  tasks only to a prefix of that many nodes with room, so the later members change
  nothing - except for a fixed tasks-per-node request, whose layout may skip nodes:
  those take the general path.  The class's total still counts toward "enough room".

Anything touching a node's profiles (a charge, a view, a hold, a state change through
:meth:`FreshMixin.own`) materialises it first, so the general code is always right; the
class answers only ever cover nodes in exactly their configured state.
tests/maui/test_nodeset.py runs both engines in lock-step.
"""

from __future__ import annotations

from math import inf
from typing import Any

from grid_tasks.maui.allocation import distribute
from grid_tasks.maui.model import Job, Node
from grid_tasks.maui.nodeset import NodeClass, NodeSet
from grid_tasks.maui.profile import StepProfile

DIMS = ("p", "m", "d", "s")
#: allocation policies whose order within a class is by index (True: descending)
_CLASS_ORDER = {"FIRSTAVAILABLE": False, "MINRESOURCE": False, "CPULOAD": False,
                "PRIORITY": False, "LASTAVAILABLE": True}


def node_profiles(node: Node) -> dict[str, StepProfile]:
    """A node's own profiles at its configuration (processors always)."""
    dims = (node.procs, node.memory, node.disk, node.swap)
    return {dim: StepProfile(amount) for dim, amount in zip(DIMS, dims)
            if amount > 0 or dim == "p"}


class Profiles(dict):  # type: ignore[type-arg]
    """``engine.prof`` of an engine over a node set: a node's profiles are made the
    first time they are asked for, and the node stops being fresh."""

    __slots__ = ("engine",)

    def __init__(self, engine: "FreshMixin") -> None:
        super().__init__()
        self.engine = engine

    def __missing__(self, name: str) -> dict[str, StepProfile]:
        node = self.engine.nodes[name]  # KeyError for an unknown node, as before
        profs = self[name] = node_profiles(node)
        self.engine.materialised(name, node, profs)
        return profs


class FreshMixin:
    """Class-wise answers for fresh nodes (see the module doc)."""

    ns: NodeSet | None = None

    def _init_from_set(self: Any, ns: NodeSet) -> None:
        self.ns = ns
        self.nodes = dict(ns.nodes)  # the set's nodes until owned (own())
        self.index = ns.index  # shared until a node is added
        self.prof = Profiles(self)
        self.owned: set[str] = set()  # nodes whose Node is the engine's own copy
        self._taken = [0] * len(ns.classes)  # materialised members per class
        self._split: dict[tuple, list[Node]] = {}  # materialised eligible, per shape

    def materialised(self: Any, name: str, node: Node, profs: dict[str, StepProfile]) -> None:
        """``name`` got its own profiles: out of its class's fresh count, into the curve
        by itself (still at its configuration)."""
        number = self.ns.class_of.get(name)
        if number is not None and node is self.ns.nodes[name]:
            self._taken[number] += 1
            if self.curve is not None:
                self.curve.adopt(name, profs["p"], self.avail.procs_now(node))
        self._split.clear()

    def own(self: Any, name: str) -> Node | None:
        """The engine's own, changeable copy of node ``name`` (None: no such node)."""
        node = self.nodes.get(name)
        if node is None or self.ns is None or name in self.owned:
            return node
        self.prof[name]  # materialised first, as the set's node  # noqa: B018
        node = self.nodes[name] = node.copy()
        self.owned.add(name)
        return node

    def add_to_set(self: Any, node: Node) -> None:
        """A node added to an engine over a set: its own from the start."""
        if self.index is self.ns.index:
            self.index = dict(self.index)
        self.owned.add(node.name)

    # -- fresh members -------------------------------------------------------------------
    def _fresh_members(self: Any, cls: NodeClass, limit: int) -> list[str]:
        """Up to ``limit`` fresh members of ``cls`` in the allocation policy's order."""
        out: list[str] = []
        if len(cls.members) == self._taken[cls.number]:
            return out
        prof = self.prof
        members = reversed(cls.members) if _CLASS_ORDER[self.policy.name] else cls.members
        for name in members:
            if name not in prof:
                out.append(name)
                if len(out) >= limit:
                    break
        return out

    def fresh_count(self: Any) -> int:
        """Usable nodes still fresh."""
        if self.ns is None:
            return 0
        return sum(len(c.members) - self._taken[c.number] for c in self.ns.classes)

    def fresh_free(self: Any) -> tuple[float, int]:
        """(processors free now, nodes with some free) over the fresh nodes, as the
        curve would count each one (its profile's value, capped by the policy)."""
        if self.ns is None:
            return 0.0, 0
        total, live = 0.0, 0
        for c in self.ns.classes:
            k = len(c.members) - self._taken[c.number]
            v0 = max(0.0, min(c.sample.procs, self.avail.procs_now(c.sample)))
            total += k * v0
            live += k if v0 > 0 else 0
        return total, live

    def free_procs_fresh(self: Any) -> bool:
        """Whether some fresh node has a processor free (``nothing_free``'s test of a
        node, which no hold covers: min(procs, procs - utilized) > 0)."""
        return self.ns is not None and any(
            len(c.members) > self._taken[c.number]
            and min(c.sample.procs, c.sample.procs - c.sample.utilized_procs) > 0
            for c in self.ns.classes)

    def individual_nodes(self: Any) -> list[Node]:
        """The nodes looked at one by one: all of them, or over a set the materialised."""
        if self.ns is None:
            return list(self.nodes.values())
        return [self.nodes[name] for name in list(self.prof)]

    def free_procs_now(self: Any, now: float) -> int:
        """Processors free on usable nodes at ``now``, measured use counted."""
        total = sum(max(0, min(self.prof[n.name]["p"].value_at(now), n.procs - n.utilized_procs))
                    for n in self.individual_nodes() if n.usable)
        for c in self.ns.classes if self.ns is not None else ():
            k = len(c.members) - self._taken[c.number]
            total += k * max(0, min(c.sample.procs, c.sample.procs - c.sample.utilized_procs))
        return int(total)

    # -- feasibility ------------------------------------------------------------------------
    @staticmethod
    def _eligible_node(node: Node, job: Job) -> bool:
        demand = job.task_demand()
        return (node.usable and job.features <= node.features
                and not any(d > c for d, c in zip(demand, (node.procs, node.memory, node.disk,
                                                            node.swap)) if d))

    def ever_fits(self: Any, job: Job) -> bool:
        """``_can_ever_fit`` over a set: its per-shape total, the engine's own nodes as
        they are now instead of as the set has them."""
        ns = self.ns
        total = ns.ever_total(job)
        eligible = {c.number for c in ns.eligible_classes(job)}
        for name in self.owned:
            template = ns.nodes.get(name)
            if template is not None and ns.class_of.get(name) in eligible:
                total -= ns.tasks_ever(job, template)
            node = self.nodes[name]
            if self._eligible_node(node, job):
                total += ns.tasks_ever(job, node)
        return total >= job.tasks

    def splits(self: Any, job: Job) -> bool:
        """Whether :meth:`fit_split` decides this job (else the general path)."""
        return self.ns is not None and not job.tasks_per_node and \
            self.policy.name in _CLASS_ORDER

    def fit_split(self: Any, job: Job, holds: list[Any], t: float, e: float,
                  now: float) -> dict[str, int] | None:
        """:meth:`Engine._alloc_at` over every eligible node at ``[t, e)``, the fresh
        ones per class (see the module doc)."""
        key = (job.task_demand(), job.features)
        touched = self._split.get(key)
        if touched is None:
            touched = self._split[key] = [n for n in self.individual_nodes()
                                          if self._eligible_node(n, job)]
        cands, total = [], 0
        for n in touched:
            view = self.view(n.name, holds)
            c = self.node_cap(n, job, view, t, e, now)
            if c > 0:
                cands.append((n, c, self._slack(view, e)))
                total += c
        for cls in self.ns.eligible_classes(job):
            c = self._fresh_cap(cls.sample, job, t, now)
            if c <= 0:
                continue
            names = self._fresh_members(cls, job.tasks)
            total += c * (len(cls.members) - self._taken[cls.number])
            cands += [(self.nodes[name], c, inf) for name in names]
        if total < job.tasks:
            return None
        ordered = self.policy.order(cands, self.index)
        alloc = distribute([(n.name, c) for n, c, _ in ordered], job.tasks,
                           self.config.task_distribution, None)
        return alloc if sum(alloc.values()) == job.tasks else None

    def _fresh_cap(self: Any, node: Node, job: Job, t: float, now: float) -> int:
        """:meth:`Engine.node_cap` of a fresh node: every profile at its configuration."""
        cap = job.tasks
        for dim, need, amount in zip(DIMS, job.task_demand(),
                                     (node.procs, node.memory, node.disk, node.swap)):
            if not need:
                continue
            free: float = amount
            if t <= now:
                if dim == "p":
                    free = min(free, self.avail.procs_now(node))
                elif dim == "m":
                    free = min(free, self.avail.memory_now(node))
            cap = min(cap, int(free // need))
            if cap <= 0:
                return 0
        return cap
