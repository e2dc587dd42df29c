"""NODEALLOCATIONPOLICY and task distribution: which nodes, and how many tasks on each.

Each policy is a small class ordering candidate nodes; the distribution then maps the
job's tasks onto them (PACK fills a node before the next, ROUNDROBIN deals one task per
node in turn).  Both honour a fixed tasks-per-node request.
"""

from __future__ import annotations

from typing import Callable, Sequence

from grid_tasks.maui.model import Node, SchedulerError

#: (node, tasks it can take, seconds its free window lasts after the job would end)
Candidate = tuple[Node, int, float]


class AllocationPolicy:
    """Orders the candidate nodes; the first ones are preferred."""

    name = "FIRSTAVAILABLE"

    def order(self, cands: list[Candidate], index: dict[str, int]) -> list[Candidate]:
        return sorted(cands, key=lambda c: index[c[0].name])


class LastAvailable(AllocationPolicy):
    """Tightest fit in time: nodes whose free window closes soonest after the job."""

    name = "LASTAVAILABLE"

    def order(self, cands: list[Candidate], index: dict[str, int]) -> list[Candidate]:
        return sorted(cands, key=lambda c: (c[2], -index[c[0].name]))


class MinResource(AllocationPolicy):
    """Nodes with the fewest configured resources first, keeping big nodes for big jobs."""

    name = "MINRESOURCE"

    def order(self, cands: list[Candidate], index: dict[str, int]) -> list[Candidate]:
        return sorted(cands, key=lambda c: (c[0].procs, c[0].memory, c[0].disk, c[0].swap, index[c[0].name]))


class CpuLoad(AllocationPolicy):
    """Least loaded nodes first."""

    name = "CPULOAD"

    def order(self, cands: list[Candidate], index: dict[str, int]) -> list[Candidate]:
        return sorted(cands, key=lambda c: (c[0].load, index[c[0].name]))


class NodePriority(AllocationPolicy):
    """Highest administrator-set node priority first."""

    name = "PRIORITY"

    def order(self, cands: list[Candidate], index: dict[str, int]) -> list[Candidate]:
        return sorted(cands, key=lambda c: (-c[0].priority, index[c[0].name]))


ALLOCATION_POLICIES: dict[str, type[AllocationPolicy]] = {
    cls.name: cls for cls in (AllocationPolicy, LastAvailable, MinResource, CpuLoad, NodePriority)
}


def allocation_policy(name: str) -> AllocationPolicy:
    try:
        return ALLOCATION_POLICIES[name.upper()]()
    except KeyError:
        raise SchedulerError(
            f"unknown NODEALLOCATIONPOLICY {name!r}: choose {', '.join(ALLOCATION_POLICIES)}"
        ) from None


def _pack(caps: Sequence[tuple[str, int]], tasks: int) -> dict[str, int]:
    out: dict[str, int] = {}
    left = tasks
    for name, cap in caps:
        take = min(cap, left)
        if take > 0:
            out[name] = take
            left -= take
        if left == 0:
            break
    return out


def _round_robin(caps: Sequence[tuple[str, int]], tasks: int) -> dict[str, int]:
    out: dict[str, int] = {}
    room = [[name, cap] for name, cap in caps if cap > 0]
    left = tasks
    while left and room:
        for slot in room:
            if left == 0:
                break
            if slot[1] > 0:
                out[slot[0]] = out.get(slot[0], 0) + 1
                slot[1] -= 1
                left -= 1
        room = [s for s in room if s[1] > 0]
    return out


DISTRIBUTIONS: dict[str, Callable[[Sequence[tuple[str, int]], int], dict[str, int]]] = {
    "PACK": _pack,
    "ROUNDROBIN": _round_robin,
}


def distribute(caps: Sequence[tuple[str, int]], tasks: int, mode: str, per_node: int | None) -> dict[str, int]:
    """Map ``tasks`` onto nodes (in preference order, each with its task capacity)."""
    if per_node:
        # a fixed tasks-per-node request decides the layout whatever the mode
        out: dict[str, int] = {}
        left = tasks
        for name, cap in caps:
            take = min(per_node, left)
            if cap >= take > 0:
                out[name] = take
                left -= take
            if left == 0:
                break
        return out
    try:
        return DISTRIBUTIONS[mode](caps, tasks)
    except KeyError:
        raise SchedulerError(f"unknown task distribution {mode!r}: choose PACK or ROUNDROBIN") from None
