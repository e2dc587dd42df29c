"""A minimal event loop driving a Scheduler the way the simulator does: each event
(submissions before terminations at one instant), then ``iterate`` right after it, and
wake-ups at ``next_wakeup``.  Returns each job's start time."""

from __future__ import annotations

import heapq

from grid_tasks.maui import Job, Node, Scheduler, SchedulerConfig


def replay(specs: list[tuple], size: int, config: SchedulerConfig) -> tuple[dict[str, float], Scheduler]:
    """specs: (id, submit, estimate, actual run, processors)."""
    sched = Scheduler([Node("pool", procs=size)], config)
    run = {s[0]: s[3] for s in specs}
    heap = [(s[1], 0, i, s) for i, s in enumerate(specs)]
    heapq.heapify(heap)
    counter = len(specs)
    starts: dict[str, float] = {}
    now = 0.0
    while heap or sched.next_wakeup(now) is not None:
        wake = sched.next_wakeup(now)
        if wake is not None and (not heap or wake < heap[0][0]):
            now = wake
            res = sched.iterate(now)
        else:
            now, kind, _, item = heapq.heappop(heap)
            if kind == 0:
                jid, submit, est, _, procs = item
                sched.submit(Job(jid, tasks=procs, walltime=est, submit_time=submit), now=now)
            else:
                sched.job_ended(item, now=now)
            res = sched.iterate(now)
        for st in res.started:
            starts[st.job_id] = st.time
            counter += 1
            heapq.heappush(heap, (st.time + run[st.job_id], 1, counter, st.job_id))
    return starts, sched
