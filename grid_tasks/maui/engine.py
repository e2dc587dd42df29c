"""The placement engine: node profiles, administrative holds, and where a job fits when.

Every node has one :class:`StepProfile` per resource it configures (procs, memory,
disk, swap).  Running jobs, job reservations and administrative reservations subtract
from those profiles over ``[start, end)``; an administrative reservation also keeps a
"remaining" profile per node that jobs admitted by its ACL may consume, so a job can
use reserved resources only when the ACL lets it.  Every charge is recorded as an
operation list, so ending a job early or releasing a reservation frees exactly what
was taken.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import inf

from grid_tasks.maui.allocation import allocation_policy, distribute
from grid_tasks.maui.capacity import CapacityCurve
from grid_tasks.maui.config import SchedulerConfig
from grid_tasks.maui.fresh import FreshMixin, node_profiles
from grid_tasks.maui.holds import Hold, HoldsMixin, Op
from grid_tasks.maui.model import Job, Node, Reservation, SchedulerError
from grid_tasks.maui.nodeset import NodeSet
from grid_tasks.maui.policies.availability import Availability, availability_policy
from grid_tasks.maui.profile import StepProfile
from grid_tasks.maui.search import sweep_applies, sweep_find

DIMS = ("p", "m", "d", "s")


@dataclass
class Placement:
    """A job holding resources: running (``running``) or reserved for the future."""

    job: Job
    start: float
    end: float
    alloc: dict[str, int]
    ops: list[Op]
    running: bool = False
    reservation: Reservation | None = None


def _node_dims(node: Node) -> tuple[int, int, int, int]:
    return (node.procs, node.memory, node.disk, node.swap)


class Engine(HoldsMixin, FreshMixin):
    """Resource timelines of one cluster; answers "where and when does this fit" (over a
    NodeSet, untouched nodes per class: :mod:`grid_tasks.maui.fresh`)."""

    def __init__(self, nodes: list[Node] | NodeSet, config: SchedulerConfig,
                 availability: Availability | None = None) -> None:
        self.config = config
        #: NODEAVAILABILITYPOLICY, chosen once: what a node can give at the present moment
        self.avail = availability or availability_policy(config.availability_policy)
        self.nodes: dict[str, Node] = {}
        self.prof: dict[str, dict[str, StepProfile]] = {}
        self.index: dict[str, int] = {}
        self.holds: dict[str, Hold] = {}
        self.placements: dict[str, Placement] = {}
        self.policy = allocation_policy(config.node_allocation_policy)
        self._ever: dict[tuple, bool] = {}  # can_ever_fit per job shape, until nodes change
        self._ever_job: dict[str, bool] = {}  # the same per job id
        self._elig: dict[tuple, tuple[list[Node], set[str]]] = {}  # eligible nodes per shape
        self._acc: dict[tuple, list[Hold]] = {}  # admitted holds per credentials
        self._acl_jobs: set[str] = set()  # job ids named by some hold ACL
        self._acl_index: dict[tuple[str, str], list[int]] = {}
        self._hold_list: list[Hold] = []
        self.curve: CapacityCurve | None = None
        if isinstance(nodes, NodeSet):
            self._init_from_set(nodes)
            return
        for node in nodes:
            self.add_node(node)

    # -- nodes ---------------------------------------------------------------------
    def add_node(self, node: Node) -> None:
        if node.name in self.nodes:
            raise SchedulerError(f"node {node.name} already exists")
        if self.ns is not None:
            self.add_to_set(node)
        self.nodes[node.name] = node
        self.nodes_changed()
        self.index[node.name] = len(self.index)
        dict.__setitem__(self.prof, node.name, node_profiles(node))

    def prune(self, now: float) -> None:
        for profs in self.prof.values():
            for p in profs.values():
                if len(p.times) > 1 and p.times[1] <= now:
                    p.prune(now)
        for hold in self.holds.values():
            for p in hold.rem.values():
                if len(p.times) > 1 and p.times[1] <= now:
                    p.prune(now)

    # -- capacity ------------------------------------------------------------------
    def eligible(self, job: Job) -> list[Node]:
        return self.eligible_set(job)[0]

    def eligible_set(self, job: Job) -> tuple[list[Node], set[str]]:
        """Usable nodes with the job's features and room for one of its tasks (cached)."""
        demand = job.task_demand()
        key = (demand, job.features)
        hit = self._elig.get(key)
        if hit is None:
            out = [node for node in self.nodes.values()
                   if node.usable and job.features <= node.features
                   and not any(d > c for d, c in zip(demand, _node_dims(node)) if d)]
            hit = self._elig[key] = (out, {n.name for n in out})
        return hit

    def nodes_changed(self) -> None:
        """A node's state or attributes changed: forget cached feasibility."""
        self._ever.clear()
        self._ever_job.clear()
        self._elig.clear()
        self.curve = None
        if self.ns is not None:
            self._split.clear()

    def holds_changed(self) -> None:
        self._acc.clear()
        self._acl_jobs = {j for h in self.holds.values() for j in h.res.acl.jobs}
        # (field, name) -> positions of the holds listing it, for quick ACL matching
        self._acl_index: dict[tuple[str, str], list[int]] = {}
        for i, h in enumerate(self.holds.values()):
            acl = h.res.acl
            for fld, names in (("u", acl.users), ("g", acl.groups), ("a", acl.accounts),
                               ("c", acl.classes), ("q", acl.qos), ("j", acl.jobs)):
                for name in names:
                    self._acl_index.setdefault((fld, name), []).append(i)
        self._hold_list = list(self.holds.values())
        self.curve = None

    @property
    def acl_jobs(self) -> set[str]:
        """Job ids some hold's ACL names (kept by :meth:`holds_changed`)."""
        return self._acl_jobs

    def can_ever_fit(self, job: Job) -> bool:
        """Could the job run at all on the configured, usable nodes (when all were free)?"""
        hit = self._ever_job.get(job.id)
        if hit is None:
            hit = self._ever_job[job.id] = self._can_ever_fit(job)
        return hit

    def _can_ever_fit(self, job: Job) -> bool:
        key = (job.tasks, job.task_demand(), job.tasks_per_node, job.features)
        hit = self._ever.get(key)
        if hit is None and self.ns is not None:
            hit = self._ever[key] = self.ever_fits(job)
        if hit is None:
            total = 0
            for node in self.eligible(job):
                cap = min((c // d for d, c in zip(job.task_demand(), _node_dims(node)) if d), default=job.tasks)
                total += min(cap, job.tasks_per_node or cap)
            hit = self._ever[key] = total >= job.tasks
        return hit

    def accessible(self, job: Job) -> list[Hold]:
        """Holds whose ACL admits the job (cached per credentials)."""
        if not self.holds:
            return []
        key = (job.user, job.group, job.account, job.job_class, job.qos,
               job.id if job.id in self._acl_jobs else None)
        hit = self._acc.get(key)
        if hit is None:
            index = self._acl_index
            found: set[int] = set()
            for fld, name in (("u", job.user), ("g", job.group), ("a", job.account),
                              ("c", job.job_class), ("q", job.qos), ("j", key[5])):
                if name is not None:
                    found.update(index.get((fld, name), ()))
            hit = self._acc[key] = [self._hold_list[i] for i in sorted(found)]
        return hit

    def capacity(self, now: float, offsets: tuple[float, ...] = ()) -> CapacityCurve:
        """The free-processors curve for ``now`` (built on first use in an iteration)."""
        curve = self.curve
        if curve is None or curve.now != now:
            procs_now = self.avail.procs_now

            def profiles():
                for node in self.individual_nodes():
                    if node.usable:
                        yield node.name, self.prof[node.name]["p"], procs_now(node)

            fresh = self.fresh_free if self.ns is not None else None
            curve = self.curve = CapacityCurve(now, profiles, offsets, fresh)
        return curve

    def iteration_over(self) -> None:
        """The iteration is over: forget its free-processors curve.  The next one has
        another ``now`` and builds its own, so keeping this one exact through the ends
        and reservation drops in between would be work thrown away (a rebuilt curve
        gives the same numbers: processor counts are integers, summed exactly)."""
        self.curve = None

    def _touched(self, alloc: dict[str, int]) -> None:
        curve = self.curve
        if curve is not None:
            for name in alloc:
                curve.refresh(name, self.prof[name]["p"])

    def view(self, name: str, holds: list[Hold]) -> StepProfile:
        """Free processors on a node as seen by a job admitted to ``holds``."""
        base = self.prof[name]["p"]
        mine = [h.rem[name] for h in holds if name in h.rem]
        if not mine:
            return base
        merged = base.copy()
        for rem in mine:
            for a, b, v in rem.segments(-inf, inf):
                merged.add(a, b, v)
        return merged

    def node_cap(self, node: Node, job: Job, view: StepProfile, t: float, e: float, now: float) -> int:
        """Tasks of ``job`` the node can hold throughout ``[t, e)``."""
        demand = job.task_demand()
        cap = job.tasks
        profs = self.prof[node.name]
        avail = self.avail
        for dim, need in zip(DIMS, demand):
            if not need:
                continue
            free = view.min_over(t, e) if dim == "p" else profs[dim].min_over(t, e)
            if t <= now:  # measured use limits the present only (availability policy)
                if dim == "p":
                    free = min(free, avail.procs_now(node))
                elif dim == "m":
                    free = min(free, avail.memory_now(node))
            cap = min(cap, int(free // need))
            if cap <= 0:
                return 0
        # with tasks per node a node takes at most that many; which nodes may take fewer
        # (only the one holding the remainder) is the distribution's business
        return min(cap, job.tasks_per_node) if job.tasks_per_node else cap

    def find(self, job: Job, t0: float, duration: float, now: float,
             holds: list[Hold] | None = None) -> tuple[float, dict[str, int]]:
        """Earliest ``t >= t0`` where the job fits for ``duration``, with its allocation."""
        found = self.find_all(job, t0, duration, now, 1, holds)
        return found[0] if found else (inf, {})

    def find_all(self, job: Job, t0: float, duration: float, now: float, limit: int,
                 holds: list[Hold] | None = None) -> list[tuple[float, dict[str, int]]]:
        """Up to ``limit`` start times (earliest first) with distinct allocations."""
        nodes = self.eligible(job)
        if not nodes:
            return []
        holds = self.accessible(job) if holds is None else holds
        views = {n.name: self.view(n.name, holds) for n in nodes}
        if len(nodes) == 1 and limit == 1 and self._single_ok(job, nodes[0], t0, now):
            t = views[nodes[0].name].earliest(t0, duration, job.procs)
            return [] if t == inf else [(t, {nodes[0].name: job.tasks})]
        if sweep_applies(job, nodes):
            return sweep_find(self, job, nodes, views, t0, duration, now, limit)
        cands = {t0}
        for n in nodes:
            cands.update(views[n.name].increases_after(t0))
            for dim, p in self.prof[n.name].items():
                if dim != "p":
                    cands.update(p.increases_after(t0))
        out: list[tuple[float, dict[str, int]]] = []
        for t in sorted(cands):
            alloc = self._alloc_at(job, nodes, views, t, t + duration, now)
            if alloc and (not out or alloc != out[-1][1]):
                out.append((t, alloc))
                if len(out) >= limit:
                    break
        return out

    def advance(self, pl: Placement, start_from: float, now: float) -> tuple[float, dict[str, int]] | None:
        """An earlier start (from ``start_from`` on) for a reserved job, or None when it cannot move."""
        job = pl.job
        if len(self.nodes) == 1 and not self.holds:
            node = next(iter(self.nodes.values()))
            if node.usable and node.name in pl.alloc and not node.utilized_procs and self._single_ok(job, node, now, now) \
                    and job.task_demand()[1:] == (0, 0, 0):
                prof = self.prof[node.name]["p"]
                t = prof.earliest_without(start_from, job.walltime, job.procs, pl.start,
                                          (pl.start, pl.end, job.procs))
                return None if t == inf else (t, pl.alloc)
        self.uncharge(pl.ops)
        t, alloc = self.find(job, start_from, job.walltime, now)
        self.charge_ops(pl.ops)
        return (t, alloc) if t < pl.start else None

    @staticmethod
    def charge_ops(ops: list[Op]) -> None:
        for prof, a, b, d in ops:
            prof.add(a, b, d)

    def _single_ok(self, job: Job, node: Node, t0: float, now: float) -> bool:
        """One node, processors only, nothing utilized: a plain profile search is exact."""
        return (job.procs_per_task > 0 and not (job.mem_per_task or job.disk_per_task or job.swap_per_task)
                and (job.tasks_per_node is None or job.tasks_per_node >= job.tasks)
                and (node.utilized_procs == 0 or t0 > now or not self.avail.counts_utilized))

    def _alloc_at(self, job: Job, nodes: list[Node], views: dict[str, StepProfile],
                  t: float, e: float, now: float) -> dict[str, int] | None:
        cands = []
        total = 0
        for n in nodes:
            c = self.node_cap(n, job, views[n.name], t, e, now)
            if c > 0:
                cands.append((n, c, self._slack(views[n.name], e)))
                total += c
        if total < job.tasks:
            return None
        ordered = self.policy.order(cands, self.index)
        alloc = distribute([(n.name, c) for n, c, _ in ordered], job.tasks,
                           self.config.task_distribution, job.tasks_per_node)
        return alloc if sum(alloc.values()) == job.tasks else None

    @staticmethod
    def _slack(view: StepProfile, e: float) -> float:
        """How long after ``e`` the node stays as free as it is at ``e`` (for LASTAVAILABLE)."""
        times, vals = view.times, view.vals
        level = view.value_at(e)
        for k in range(len(times)):
            if times[k] > e and vals[k] < level:
                return times[k] - e
        return inf

    def fits(self, job: Job, alloc: dict[str, int], t: float, e: float, now: float,
             holds: list[Hold]) -> bool:
        """Can this exact allocation hold over ``[t, e)``?"""
        for name, k in alloc.items():
            node = self.nodes.get(name)
            if node is None or not node.usable:
                return False
            if self.node_cap(node, job, self.view(name, holds), t, e, now) < k:
                return False
        return True

    # -- charging ------------------------------------------------------------------
    def charge(self, job: Job, start: float, end: float, alloc: dict[str, int],
               holds: list[Hold]) -> list[Op]:
        """Take the resources; admitted holds are consumed before the free pool."""
        ops: list[Op] = []
        demand = job.task_demand()
        for name, k in alloc.items():
            profs = self.prof[name]
            for dim, need in zip(DIMS, demand):
                if not need:
                    continue
                amount = k * need
                if dim == "p":
                    ops.extend(self._cover(job, name, start, end, amount, holds))
                else:
                    ops.append((profs[dim], start, end, -amount))
        for prof, a, b, d in ops:
            prof.add(a, b, d)
        return ops

    def _cover(self, job: Job, name: str, start: float, end: float, amount: int,
               holds: list[Hold]) -> list[Op]:
        ops: list[Op] = []
        left = [(start, end, amount)]
        for hold in holds:
            rem = hold.rem.get(name)
            if rem is None:
                continue
            nxt = []
            for a, b, amt in left:
                for x, y, r in rem.segments(a, b):
                    c = min(amt, max(r, 0))
                    if c > 0:
                        ops.append((rem, x, y, -c))
                        hold.users.add(job.id)
                    if amt - c > 0:
                        nxt.append((x, y, amt - c))
            left = nxt
        base = self.prof[name]["p"]
        ops.extend((base, a, b, -amt) for a, b, amt in left)
        return ops

    @staticmethod
    def uncharge(ops: list[Op], since: float = -inf) -> None:
        """Give back what ``ops`` took, from ``since`` on."""
        for prof, a, b, d in ops:
            a = max(a, since)
            if b > a:
                prof.add(a, b, -d)

    def place(self, job: Job, start: float, duration: float, alloc: dict[str, int],
              running: bool, reservation: Reservation | None = None) -> Placement:
        holds = self.accessible(job)
        end = start + duration
        ops = self.charge(job, start, end, alloc, holds)
        pl = Placement(job, start, end, dict(alloc), ops, running, reservation)
        self.placements[job.id] = pl
        self._touched(alloc)
        return pl

    def remove(self, job_id: str, since: float = -inf) -> Placement | None:
        pl = self.placements.pop(job_id, None)
        if pl is not None:
            self.uncharge(pl.ops, since)
            self._touched(pl.alloc)
        return pl
