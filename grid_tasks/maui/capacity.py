"""How many processors stay free from ``now`` for ``w`` seconds, summed over the cluster.

``F(w) = sum over usable nodes of min(free on the node over [now, now + w))`` is a
non-increasing step function of ``w``.  A job needing more than ``F(walltime)``
processors cannot start now, so one lookup rejects most backfill candidates of a big
queue without touching the nodes.  Each node contributes its free amount at ``now``
minus a "drop" at every offset where its running minimum falls; drops live in a
Fenwick tree over the sorted offsets, so after a start only the touched nodes are
redone.  A reservation can bring an offset that is not in the tree yet: the curve is
then rebuilt on the next lookup.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Callable, Iterable

from grid_tasks.maui.profile import StepProfile

Events = list[tuple[float, float]]


class CapacityCurve:
    """``F(w)`` for one iteration (one ``now``), kept exact as jobs start."""

    def __init__(self, now: float, profiles: Callable[[], Iterable[tuple[str, StepProfile, float]]],
                 offsets: Iterable[float] = (),
                 fresh: Callable[[], tuple[float, int]] | None = None) -> None:
        self.now = now
        self._profiles = profiles  # yields (node, profile, cap at now) for the usable nodes
        self._extra = set(offsets)
        #: (free now, nodes with some free) of the fresh nodes of an engine over a node
        #: set (:mod:`grid_tasks.maui.fresh`): constant profiles, no drop, never by name
        self._fresh = fresh
        self.fresh_live = 0
        self.build()

    def _node(self, prof: StepProfile, cap: float) -> tuple[float, Events]:
        times, vals = prof.times, prof.vals
        i = bisect_right(times, self.now) - 1
        low = max(0.0, min(vals[i], cap))
        start = low
        events: Events = []
        for k in range(i + 1, len(times)):
            v = vals[k]
            if v < low:
                events.append((times[k] - self.now, low - max(v, 0.0)))
                low = max(v, 0.0)
                if low == 0:
                    break
        return start, events

    def build(self) -> None:
        self.v0: dict[str, float] = {}
        self.ev: dict[str, Events] = {}
        self.caps: dict[str, float] = {}
        offsets = set(self._extra)
        for name, prof, cap in self._profiles():
            v0, events = self._node(prof, cap)
            self.v0[name], self.ev[name], self.caps[name] = v0, events, cap
            offsets.update(d for d, _ in events)
        self.coords = sorted(offsets)
        self.index = {d: i for i, d in enumerate(self.coords)}
        self.tree = [0.0] * (len(self.coords) + 1)
        fresh_total, self.fresh_live = self._fresh() if self._fresh is not None else (0.0, 0)
        self.total = sum(self.v0.values()) + fresh_total
        self.live = {n for n, v in self.v0.items() if v > 0}
        for events in self.ev.values():
            for d, dec in events:
                self._add(self.index[d], dec)
        self.stale = False

    def _add(self, i: int, value: float) -> None:
        tree = self.tree
        i += 1
        while i < len(tree):
            tree[i] += value
            i += i & -i

    def _prefix(self, count: int) -> float:
        tree = self.tree
        s = 0.0
        while count > 0:
            s += tree[count]
            count -= count & -count
        return s

    def adopt(self, name: str, prof: StepProfile, cap: float) -> None:
        """A fresh node is counted by itself from now on (its profile still constant:
        it moves from the fresh sum to its own entry, the total unchanged)."""
        if self.stale or name in self.v0:
            return
        v0, events = self._node(prof, cap)
        self.v0[name], self.ev[name], self.caps[name] = v0, events, cap
        if v0 > 0:
            self.live.add(name)
            self.fresh_live -= 1
        for d, dec in events:  # none for a constant profile; kept exact all the same
            i = self.index.get(d)
            if i is None:
                self.stale = True
                return
            self._add(i, dec)

    def refresh(self, name: str, prof: StepProfile) -> None:
        """The node's profile changed: redo its contribution."""
        if self.stale or name not in self.v0:
            return
        for d, dec in self.ev[name]:
            self._add(self.index[d], -dec)
        self.total -= self.v0[name]
        v0, events = self._node(prof, self.caps[name])
        self.v0[name], self.ev[name] = v0, events
        self.total += v0
        if v0 > 0:
            self.live.add(name)
        else:
            self.live.discard(name)
        for d, dec in events:
            i = self.index.get(d)
            if i is None:
                self.stale = True  # an offset the tree has no slot for: rebuild lazily
                return
            self._add(i, dec)

    def free_for(self, w: float) -> float:
        """Processors free throughout ``[now, now + w)`` summed over the nodes."""
        if self.stale:
            self.build()
        return self.total - self._prefix(bisect_left(self.coords, w))

    def nodes_free_now(self) -> set[str]:
        """Nodes with at least some processors free at ``now``, fresh ones left out
        (:attr:`fresh_live` counts them)."""
        if self.stale:
            self.build()
        return self.live

    def live_count(self) -> int:
        """How many nodes have some processors free at ``now``, fresh ones included."""
        if self.stale:
            self.build()
        return len(self.live) + self.fresh_live
