"""Scheduling policies as small objects, each chosen once from the configuration.

Three concerns, one module each: the queue policy (RESERVATIONPOLICY and
RESERVATIONDEPTH), the backfill policy (BACKFILLPOLICY) and the node availability
policy (NODEAVAILABILITYPOLICY).  :func:`policies_for` maps a
:class:`~grid_tasks.maui.config.SchedulerConfig` to instances once, when a scheduler
is built, so the iteration asks objects questions instead of branching on names (after
flux-sched's qmanager, where EASY is the backfill base with reservation depth 1).
The presets are configurations of these: fcfs = Highest(0) + NoBackfill, easy =
Highest(1) + FirstFit, conservative = Highest(unlimited) + FirstFit.
"""

from __future__ import annotations

from dataclasses import dataclass

from grid_tasks.maui.config import SchedulerConfig
from grid_tasks.maui.policies.availability import (
    AVAILABILITY_POLICIES, Availability, Combined, Dedicated, Utilized, availability_policy,
)
from grid_tasks.maui.policies.backfill import (
    BACKFILL_POLICIES, Backfill, BestFit, FirstFit, Greedy, NoBackfill, backfill_policy,
)
from grid_tasks.maui.policies.metric import Machine, Metric, backfill_metric, machine_totals
from grid_tasks.maui.policies.queue import (
    QUEUE_POLICIES, CurrentHighest, Highest, Never, QueuePolicy, queue_policy,
)
from grid_tasks.maui.policies.registry import UnknownPolicyError


@dataclass(frozen=True)
class Policies:
    """The policy objects of one scheduler."""

    queue: QueuePolicy
    backfill: Backfill
    availability: Availability


def policies_for(config: SchedulerConfig, machine: Machine | None = None) -> Policies:
    """Instances for ``config``'s RESERVATIONPOLICY/DEPTH, BACKFILLPOLICY with its
    BACKFILLMETRIC and NODEAVAILABILITYPOLICY (raises :class:`UnknownPolicyError` for an
    unknown name); ``machine`` (total processors, memory, disk, swap) values PE."""
    return Policies(
        queue=queue_policy(config.reservation_policy, config.reservation_depth),
        backfill=backfill_policy(config.backfill_policy,
                                 backfill_metric(config.backfill_metric, machine)),
        availability=availability_policy(config.availability_policy),
    )


__all__ = [
    "AVAILABILITY_POLICIES", "Availability", "BACKFILL_POLICIES", "Backfill", "BestFit", "Combined",
    "CurrentHighest", "Dedicated", "FirstFit", "Greedy", "Highest", "Machine", "Metric", "Never",
    "NoBackfill", "Policies",
    "QUEUE_POLICIES", "QueuePolicy", "UnknownPolicyError", "Utilized", "availability_policy",
    "backfill_metric", "backfill_policy", "machine_totals", "policies_for", "queue_policy",
]
