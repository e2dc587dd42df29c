"""The idle queue, and which of its jobs are ranked every iteration.

A job that can never start — no usable nodes hold it, or a hard throttle refuses it
even with nothing of its credentials running — stays idle (``showq`` lists it, a
cancel finds it) but is *parked*: ranking and considering it again every iteration
changes nothing and made a site's replay grow with the number of such jobs times the
number of iterations.  What "can never start" means is the scheduler's business
(``may_ever_start``); it is asked again whenever the nodes change.
"""

from __future__ import annotations

from itertools import compress
from operator import attrgetter
from typing import Callable

import numpy as np

from grid_tasks.maui.ever import EverStart
from grid_tasks.maui.model import Job, by_shape
from grid_tasks.maui.queue_cache import QueueCache, positions
from grid_tasks.maui.ranking import Ranking

_HOLDS, _DEPENDS = attrgetter("holds"), attrgetter("depends_on")


class IdleQueue:
    """Idle jobs by id (``jobs``), the ones that could ever start (``ready``)."""

    def __init__(self, may_ever_start: EverStart, ranking: Ranking) -> None:
        self.jobs: dict[str, Job] = {}
        self.ready: dict[str, Job] = {}
        self._may_ever_start = may_ever_start
        self._ranking = ranking
        self._parked_priority: set[str] = set()  # parked jobs with a system priority
        self._plain: list[Job] | None = None  # the ready jobs, all feasible (see load)

    @property
    def parked(self) -> int:
        return len(self.jobs) - len(self.ready)

    @property
    def parked_priority(self) -> bool:
        """Whether a parked job carries a system priority (the ranking then is by score,
        as it would be with that job in it)."""
        return bool(self._parked_priority)

    def add(self, job: Job) -> None:
        self._plain = None
        self.jobs[job.id] = job
        self._classify(job)

    def load(self, jobs: list[Job], cache: QueueCache) -> None:
        """Add many jobs at once to an empty queue, classifying only the jobs the
        ``cache`` has no verdict for (the very objects of the last list it judged keep
        theirs; the rest are asked once per shape); the same list as the last one
        loaded with it takes the queue it left, copied.  Column-wise: with 100,000
        jobs a step per job in Python was most of a changed queue's load."""
        if self.jobs:
            raise ValueError("load() fills an empty queue")
        kept = cache.loaded
        if kept is not None and kept[0] is jobs:
            _, queued, ready, parked, plain = kept
            self.jobs.update(queued)
            self.ready.update(queued if ready is None else ready)
            self._parked_priority.update(parked)
            self._plain = plain
            return
        cache.loaded = None  # (freed before the new queue is built: a lower peak)
        ok = self._verdicts(jobs, cache)
        ids = cache.ids_of(jobs)
        self.jobs.update(zip(ids, jobs))
        every = bool(ok.all())
        self.ready.update(self.jobs if every else compress(zip(ids, jobs), ok))
        for k in np.flatnonzero(~ok).tolist():
            if jobs[k].priority:
                self._parked_priority.add(ids[k])
        plain: list[Job] | None = list(jobs) if every else list(compress(jobs, ok))
        if any(map(_HOLDS, plain)) or any(map(_DEPENDS, plain)):
            plain = None  # if every ready job is feasible, whatever completes
        self._plain = plain
        # (no second copy when every queued job is ready: ``None`` stands for it)
        cache.loaded = (jobs, dict(self.jobs), None if every else dict(self.ready),
                        set(self._parked_priority), plain)

    def _verdicts(self, jobs: list[Job], cache: QueueCache) -> np.ndarray:
        """Whether each job may ever start: the cache's verdict for a job object it
        judged last, else asked (once per job shape); the cache then holds
        this list's."""
        src, ids = positions(cache.judged_ids, jobs)
        hit = src >= 0
        cache.shaped = None
        if not hit.any():  # all new (a first load): the shapes are kept for the ranking
            shapes, reps = by_shape(jobs)
            cache.shaped = (jobs, shapes, reps)
            ok = np.array(self._may_ever_start.many(jobs, (shapes, reps)), dtype=bool)
        else:
            ok = np.zeros(len(jobs), dtype=bool)
            ok[hit] = cache.judged_ok[src[hit]]
            new = np.flatnonzero(~hit).tolist()
            if new:
                ok[new] = self._may_ever_start.many([jobs[k] for k in new])
        cache.judged, cache.judged_ok, cache.judged_ids = jobs, ok, ids
        return ok

    @property
    def loaded_ready(self) -> list[Job] | None:
        """The ready jobs as :meth:`load` listed them, while the queue is as loaded."""
        return self._plain

    def feasible(self, feasible: Callable[[Job], bool]) -> list[Job]:
        """The ready jobs ``feasible`` passes, in queue order (the list kept by
        :meth:`load` while the queue is as loaded: it holds no job with holds or
        dependencies, so each passes)."""
        if self._plain is not None:
            return self._plain
        return [j for j in self.ready.values() if feasible(j)]

    def drop(self, job_id: str) -> Job | None:
        """The job left the queue (started or cancelled); None if it was not idle."""
        self._plain = None
        self.ready.pop(job_id, None)
        self._ranking.forget(job_id)
        self._parked_priority.discard(job_id)
        return self.jobs.pop(job_id, None)

    def reclassify(self) -> None:
        """The nodes changed: what can ever fit may have changed too."""
        self._plain = None
        self.ready.clear()
        self._parked_priority.clear()
        for job in self.jobs.values():
            self._classify(job)

    def _classify(self, job: Job) -> None:
        if self._may_ever_start(job):
            self.ready[job.id] = job
        elif job.priority:
            self._parked_priority.add(job.id)
