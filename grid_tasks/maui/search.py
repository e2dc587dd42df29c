"""Earliest start of a processors-only job over many nodes, by one sweep through time.

The candidate start times are the moments some node's free processors go up.  Sweeping
them in order while keeping the sum of every node's free tasks *at* that moment gives
an upper bound on what a window starting there can hold; only when the bound reaches
the job's size is the exact window check (minimum over the whole walltime, per node)
done.  That replaces "every candidate x every node" by one sort and a few exact checks.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import TYPE_CHECKING

from grid_tasks.maui.model import Job, Node
from grid_tasks.maui.profile import StepProfile

if TYPE_CHECKING:  # pragma: no cover
    from grid_tasks.maui.engine import Engine


def sweep_applies(job: Job, nodes: list[Node]) -> bool:
    """Processors-only requests on several nodes (other resources have their own times)."""
    return (len(nodes) > 1 and job.procs_per_task > 0
            and not (job.mem_per_task or job.disk_per_task or job.swap_per_task))


def sweep_find(engine: "Engine", job: Job, nodes: list[Node], views: dict[str, StepProfile],
               t0: float, duration: float, now: float, limit: int) -> list[tuple[float, dict[str, int]]]:
    """Up to ``limit`` (start, allocation) pairs, earliest first, distinct allocations."""
    ppt = job.procs_per_task
    cur: dict[str, float] = {}
    bound = 0
    events: list[tuple[float, str, float]] = []
    for node in nodes:
        prof = views[node.name]
        times, vals = prof.times, prof.vals
        i = bisect_right(times, t0) - 1
        cur[node.name] = vals[i]
        bound += max(vals[i], 0) // ppt
        events.extend((times[k], node.name, vals[k]) for k in range(i + 1, len(times)))
    events.sort()
    out: list[tuple[float, dict[str, int]]] = []
    tries = [0]

    def attempt(t: float) -> bool:
        alloc = engine._alloc_at(job, nodes, views, t, t + duration, now)
        if alloc and (not out or alloc != out[-1][1]):
            out.append((t, alloc))
        if out:
            tries[0] += 1  # alternatives are a courtesy: bound the exact checks spent on them
        return len(out) >= limit or tries[0] > 4 * limit

    if bound >= job.tasks and attempt(t0):
        return out
    i, n = 0, len(events)
    while i < n:
        t = events[i][0]
        rose = False
        while i < n and events[i][0] == t:
            _, name, v = events[i]
            old = cur[name]
            bound += max(v, 0) // ppt - max(old, 0) // ppt
            rose = rose or v > old
            cur[name] = v
            i += 1
        if rose and bound >= job.tasks and attempt(t):
            break
    return out
