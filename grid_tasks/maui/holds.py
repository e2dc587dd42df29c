"""Administrative holds of the placement engine (a mixin of :class:`Engine`): charging a
reservation on the nodes without overcommitting, and giving it back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from grid_tasks.maui.model import Job, Reservation, ReservationRefused, SchedulerError
from grid_tasks.maui.profile import StepProfile

if TYPE_CHECKING:  # pragma: no cover
    from grid_tasks.maui.engine import Engine


#: One charge on a node's profile: (profile, start, end, amount).
Op = tuple[StepProfile, float, float, float]


@dataclass
class Hold:
    """An administrative reservation's charge on the nodes, and what is left of it."""

    res: Reservation
    rem: dict[str, StepProfile] = field(default_factory=dict)
    ops: list[Op] = field(default_factory=list)
    users: set[str] = field(default_factory=set)  # jobs consuming it
    size: float = 0.0  # processors it holds in all
    sources: list["Hold"] = field(default_factory=list)  # holds it was allowed to draw from


class HoldsMixin:
    """Adding and releasing administrative reservations."""

    def add_hold(self: "Engine", res: Reservation, now: float, holds: list[Hold],
                 take_in: bool = False) -> Reservation:
        """Charge an administrative reservation, refusing any overcommit.  With ``take_in``,
        jobs the reservation admits that already hold its resources are moved inside it."""
        if res.name in self.holds or res.name in self.placements:
            raise ReservationRefused(f"reservation {res.name} already exists")
        start = max(res.start, now)
        if res.end <= start:
            raise ReservationRefused(f"reservation {res.name} ends before now ({now})")
        # jobs the reservation admits may already hold its resources (a running job
        # inside it, restored before the reservation): lift them, then put them back
        # inside it, so the order in which state is rebuilt does not matter
        inside = [pl for pl in self.placements.values()
                  if take_in and pl.end > start and pl.start < res.end and res.acl.admits(pl.job)
                  and (not res.nodes or set(pl.alloc) & set(res.nodes))]
        for pl in inside:
            self.uncharge(pl.ops)
        try:
            alloc = self._hold_alloc(res, start, now, holds)
        except ReservationRefused:
            for pl in inside:
                self.charge_ops(pl.ops)
            raise
        hold = Hold(res, sources=list(holds))
        probe = Job(id=f"@{res.name}", tasks=1, procs_per_task=1, walltime=1.0)
        for name, procs in alloc.items():
            hold.ops.extend(self._cover(probe, name, start, res.end, procs, holds))
            rem = StepProfile(0)
            rem.add(start, res.end, procs)
            hold.rem[name] = rem
        for prof, a, b, d in hold.ops:
            prof.add(a, b, d)
        hold.size = float(sum(alloc.values()))
        res.allocation = {n: (p // res.procs_per_task if res.tasks else p) for n, p in alloc.items()}
        self.holds[res.name] = hold
        self.holds_changed()
        for pl in inside:
            pl.ops = self.charge(pl.job, pl.start, pl.end, pl.alloc, self.accessible(pl.job))
            self._touched(pl.alloc)
        return res

    def _hold_alloc(self: "Engine", res: Reservation, start: float, now: float, holds: list[Hold]) -> dict[str, int]:
        if res.nodes:
            alloc = {}
            for name in res.nodes:
                node = self.nodes.get(name)
                if node is None:
                    raise ReservationRefused(f"reservation {res.name}: no node {name!r}")
                want = node.procs if not res.tasks else 0
                free = self.view(name, holds).min_over(start, res.end)
                if want and free < want:
                    raise ReservationRefused(
                        f"reservation {res.name}: node {name} has only {free:g} of {want} processors "
                        f"free over [{start:g}, {res.end:g})")
                alloc[name] = want
            if not res.tasks:
                return alloc
        probe = Job(id=f"@{res.name}", tasks=res.tasks, procs_per_task=res.procs_per_task,
                    walltime=res.end - start, mem_per_task=res.mem_per_task)
        nodes = [n for n in self.eligible(probe) if not res.nodes or n.name in res.nodes]
        views = {n.name: self.view(n.name, holds) for n in nodes}
        tasks = self._alloc_at(probe, nodes, views, start, res.end, now - 1)
        if not tasks:
            raise ReservationRefused(
                f"reservation {res.name}: {res.tasks} x {res.procs_per_task} processors are not free "
                f"over [{start:g}, {res.end:g})")
        return {n: k * res.procs_per_task for n, k in tasks.items()}

    def release_hold(self: "Engine", name: str, now: float) -> Reservation:
        """Give a reservation's resources back to where they came from; whatever jobs (or
        reservations) consumed of it is charged again through what they may still use."""
        hold = self.holds.pop(name, None)
        if hold is None:
            raise SchedulerError(f"no reservation named {name!r}")
        self.holds_changed()
        self.uncharge(hold.ops, now)
        mine = {id(rem): node for node, rem in hold.rem.items()}
        for user in hold.users:
            if user.startswith("@"):
                other = self.holds.get(user[1:])
                if other is not None:
                    other.ops = self._recover(other.ops, mine, Job(id=user), other.sources, now)
                continue
            pl = self.placements.get(user)
            if pl is not None:
                pl.ops = self._recover(pl.ops, mine, pl.job, self.accessible(pl.job), now)
        for node in hold.rem:
            self._touched({node: 0})
        return hold.res

    def _recover(self: "Engine", ops: list, mine: dict[int, str], job: Job, holds: list,
                 now: float) -> list:
        """Move the parts of ``ops`` taken from a released hold onto ``holds`` or the node."""
        kept, moved = [], []
        for prof, a, b, d in ops:
            node = mine.get(id(prof))
            if node is None:
                kept.append((prof, a, b, d))
            elif b > now:
                moved.extend(self._cover(job, node, max(a, now), b, -d, [h for h in holds if h.res.name in self.holds]))
        for prof, a, b, d in moved:
            prof.add(a, b, d)
        return kept + moved
