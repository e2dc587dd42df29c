"""Tie policies of the planner: how schedules with the same start are ordered.

Small interchangeable classes (as flux-sched's queue policies): every policy orders by
start first, then by its own keys, then by the RMs' order in the caller's estimators.
:data:`POLICIES` names them for configuration (``earliest``, ``spread``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from grid_tasks.broker.planner import Schedule


class TiePolicy:
    """Orders schedules: always by start first; subclasses say how ties are broken."""

    name = "base"

    def key(self, schedule: Schedule, rank: Mapping[str, int]) -> tuple[Any, ...]:
        """Sort key; ``rank`` is each RM's position in the caller's estimators."""
        return (schedule.start, *self.ties(schedule),
                tuple(rank[p.rm] for p in schedule.placements))

    def ties(self, schedule: Schedule) -> tuple[Any, ...]:  # pragma: no cover - abstract
        """The tie-breaking keys after the start."""
        raise NotImplementedError


class EarliestTies(TiePolicy):
    """Earliest start, then fewest distinct RMs, then earliest finish."""

    name = "earliest"

    def ties(self, schedule: Schedule) -> tuple[Any, ...]:
        return (len(schedule.rms), schedule.end)


class SpreadTies(TiePolicy):
    """Earliest start, then most distinct RMs (spreads load), then earliest finish."""

    name = "spread"

    def ties(self, schedule: Schedule) -> tuple[Any, ...]:
        return (-len(schedule.rms), schedule.end)


POLICIES: dict[str, type[TiePolicy]] = {"earliest": EarliestTies, "spread": SpreadTies}
