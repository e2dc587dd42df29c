"""Queue policies (RESERVATIONPOLICY with RESERVATIONDEPTH): which blocked jobs get a
reservation and what happens to reservations between iterations.

As in flux-sched's queue policies, the depth is a number on a shared base: EASY is
depth 1, conservative unlimited, fcfs 0; the subclasses differ only in how a
reservation lives on.  The scheduler asks the policy; it never compares names.
"""

from __future__ import annotations

from math import inf
from typing import ClassVar, Iterable

from grid_tasks.maui.config import ReservationPolicy
from grid_tasks.maui.policies.registry import lookup


class QueuePolicy:
    """Base: reservations for up to ``depth`` blocked jobs, remade every iteration."""

    kind: ClassVar[ReservationPolicy]
    #: kept reservations are moved earlier, in priority order, after resources were freed
    reoptimizes: ClassVar[bool] = False

    def __init__(self, depth: int | None) -> None:
        self.depth: float = inf if depth is None else depth

    def dropped(self, reserved: Iterable[str], ranked: set[str]) -> list[str]:
        """Job reservations to release at the start of an iteration (before the pass)."""
        return list(reserved)


class CurrentHighest(QueuePolicy):
    """CURRENTHIGHEST: every iteration drops the job reservations and makes them again
    for the current top jobs, so a reservation follows today's priorities."""

    kind = ReservationPolicy.CURRENTHIGHEST


class Highest(QueuePolicy):
    """HIGHEST: a job keeps its reservation until it starts (or leaves the ranking);
    the reservation is only ever moved earlier.  This is how the reference simulator
    (pyss) re-places its jobs, which is why the presets use it."""

    kind = ReservationPolicy.HIGHEST
    reoptimizes = True

    def dropped(self, reserved: Iterable[str], ranked: set[str]) -> list[str]:
        return [j for j in reserved if j not in ranked]


class Never(QueuePolicy):
    """NEVER: no job reservations at all, whatever the configured depth."""

    kind = ReservationPolicy.NEVER

    def __init__(self, depth: int | None = 0) -> None:
        super().__init__(0)


QUEUE_POLICIES: dict[ReservationPolicy, type[QueuePolicy]] = {
    cls.kind: cls for cls in (Highest, CurrentHighest, Never)
}


def queue_policy(name: ReservationPolicy | str, depth: int | None) -> QueuePolicy:
    """The queue policy RESERVATIONPOLICY ``name`` with RESERVATIONDEPTH ``depth``."""
    return lookup(QUEUE_POLICIES, "RESERVATIONPOLICY", name)(depth)
