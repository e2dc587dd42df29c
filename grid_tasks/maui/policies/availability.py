"""Node availability policies (NODEAVAILABILITYPOLICY): which of dedicated and utilized
resources make a node busy *now*.

Dedicated resources are what the scheduler itself charged (the node profiles);
utilized ones are what the node daemons measured.  The engine asks the policy for a
ceiling on what a node can give at the present moment; the future is dedicated only,
since nobody can measure it.
"""

from __future__ import annotations

from math import inf
from typing import ClassVar

from grid_tasks.maui.config import AvailabilityPolicy
from grid_tasks.maui.model import Node
from grid_tasks.maui.policies.registry import lookup


class Availability:
    """Base: R.Available = R.Configured - MAX(R.Dedicated, R.Utilized) (COMBINED)."""

    kind: ClassVar[AvailabilityPolicy]
    #: measured use limits what a node gives now (False: the profiles alone decide)
    counts_utilized: ClassVar[bool] = True

    def procs_now(self, node: Node) -> float:
        """Ceiling on the node's free processors at the present moment."""
        return node.procs - node.utilized_procs

    def memory_now(self, node: Node) -> float:
        """Ceiling on the node's free memory at the present moment."""
        return node.memory - node.utilized_memory


class Combined(Availability):
    """COMBINED: busy by whichever of dedicated and utilized is larger."""

    kind = AvailabilityPolicy.COMBINED


class Utilized(Combined):
    """UTILIZED counts like COMBINED: ignoring dedicated resources would let two jobs
    share processors the scheduler already gave away (DESIGN invariant 1)."""

    kind = AvailabilityPolicy.UTILIZED


class Dedicated(Availability):
    """DEDICATED: only what the scheduler charged counts; measured load is ignored."""

    kind = AvailabilityPolicy.DEDICATED
    counts_utilized = False

    def procs_now(self, node: Node) -> float:
        return inf

    def memory_now(self, node: Node) -> float:
        return inf


AVAILABILITY_POLICIES: dict[AvailabilityPolicy, type[Availability]] = {
    cls.kind: cls for cls in (Combined, Dedicated, Utilized)
}


def availability_policy(name: AvailabilityPolicy | str) -> Availability:
    """The availability policy NODEAVAILABILITYPOLICY ``name``."""
    return lookup(AVAILABILITY_POLICIES, "NODEAVAILABILITYPOLICY", name)()
