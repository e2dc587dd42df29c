"""A deliberately naive re-statement of the reference simulator's algorithms (pyss), for
equivalence tests: processors over time as a list of occupied intervals, every question
answered by brute force.  Written from the algorithm's description, not its code.

``replay(jobs, procs, policy)`` -> {job id: start time}; jobs are (id, submit, estimate,
actual run, processors).  Events at one instant: submissions first, then terminations.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass


@dataclass
class RJob:
    id: str
    submit: float
    estimate: float
    run: float
    procs: int
    start: float | None = None


class Timeline:
    """Occupied intervals [start, end) with processor counts."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.iv: dict[str, list[float]] = {}  # id -> [start, end, procs]

    def free_at(self, t: float) -> int:
        return self.size - sum(p for s, e, p in self.iv.values() if s <= t < e)

    def fits(self, t: float, dur: float, procs: int, skip: str | None = None) -> bool:
        points = {t} | {s for s, _, _ in self.iv.values() if t < s < t + dur}
        for x in points:
            used = sum(p for k, (s, e, p) in self.iv.items() if k != skip and s <= x < e)
            if self.size - used < procs:
                return False
        return True

    def earliest(self, now: float, dur: float, procs: int) -> float:
        cands = sorted({now} | {e for _, e, _ in self.iv.values() if e > now})
        for t in cands:
            if self.fits(t, dur, procs):
                return t
        raise AssertionError("never fits")

    def assign(self, job: RJob, t: float) -> None:
        job.start = t
        self.iv[job.id] = [t, t + job.estimate, job.procs]

    def cut_tail(self, job: RJob, now: float) -> None:
        self.iv[job.id][1] = now


def _events(jobs: list[RJob]) -> list:
    heap = [(j.submit, 0, i, j) for i, j in enumerate(jobs)]
    heapq.heapify(heap)
    return heap


def replay(specs: list[tuple], size: int, policy: str) -> dict[str, float]:
    jobs = [RJob(*s) for s in specs]
    tl = Timeline(size)
    waiting: list[RJob] = []
    heap = _events(jobs)
    counter = len(jobs)
    ended: set[str] = set()

    def push_end(job: RJob) -> None:
        nonlocal counter
        counter += 1
        heapq.heappush(heap, (job.start + job.run, 1, counter, job))

    while heap:
        now, kind, _, job = heapq.heappop(heap)
        if kind == 1:
            if job.id in ended or job.start is None or job.start + job.run != now:
                continue  # outdated termination of a job moved earlier
            ended.add(job.id)
            tl.cut_tail(job, now)
        else:
            waiting.append(job)
        if policy == "conservative":
            _conservative(tl, waiting, job, kind, now, push_end)
        else:
            for started in _easy(tl, waiting, now, backfill=policy == "easy"):
                push_end(started)
    return {j.id: j.start for j in jobs}


def _easy(tl: Timeline, waiting: list[RJob], now: float, backfill: bool) -> list[RJob]:
    out = []
    while waiting and tl.free_at(now) >= waiting[0].procs:
        job = waiting.pop(0)
        tl.assign(job, now)
        out.append(job)
    if not backfill or len(waiting) < 2:
        return out
    head = waiting[0]
    for job in list(waiting[1:]):
        if tl.free_at(now) < job.procs:
            continue
        shadow = tl.earliest(now, head.estimate, head.procs)
        tl.iv["@head"] = [shadow, shadow + head.estimate, head.procs]
        ok = tl.fits(now, job.estimate, job.procs)
        del tl.iv["@head"]
        if ok:
            waiting.remove(job)
            tl.assign(job, now)
            out.append(job)
    return out


def _conservative(tl, waiting, job, kind, now, push_end) -> None:
    if kind == 0:
        t = tl.earliest(now, job.estimate, job.procs)
        tl.assign(job, t)
        push_end(job)
        return
    waiting.remove(job)
    for other in list(waiting):
        if other.start <= now:
            continue
        del tl.iv[other.id]
        before = other.start
        t = tl.earliest(now, other.estimate, other.procs)
        tl.assign(other, t)
        if t != before:
            push_end(other)
