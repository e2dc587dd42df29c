"""Ranking the idle queue every iteration, fast, with exactly :func:`prioritize`'s order.

A site's queue can hold thousands of idle jobs and the scheduler ranks all of them
every iteration.  Two things make that cheap without changing a single score:

* what cannot change while a job waits (credential priorities, size) is weighted
  once per job and kept in a memo until the job leaves the queue;
* a big queue is scored column-wise with numpy: IEEE-754 addition, multiplication
  and division are correctly rounded in numpy as in Python, and every column is
  summed in :func:`grid_tasks.maui.priority.score`'s order, so each score is the
  same float and the order (score, then submission) the same list.
"""

from __future__ import annotations

from itertools import repeat
from typing import Iterable, Sequence

import numpy as np

from grid_tasks.maui.config import SchedulerConfig
from grid_tasks.maui.model import Job
from grid_tasks.maui.priority import (
    _CREDENTIAL_ATTRS, FIXED, RAW, Fairshare, RawFn, Terms, weighted_terms,
)

#: From this many jobs on, the queue is scored with numpy (fewer: per job, in Python).
VECTOR_FROM = 48

#: Fairshare subcomponent -> the job attribute naming its credential.
_FS_ATTRS = {"FS" + kind: attr for kind, attr in _CREDENTIAL_ATTRS.items()}

#: Per component: (component weight, ((subcomponent, its function, weight), ...), fixed).
Compiled = tuple[tuple[float, tuple[tuple[str, RawFn, float], ...], bool], ...]


def _compile(terms: Terms) -> Compiled:
    return tuple((cw, tuple((sub, RAW[sub], sw) for sub, sw in subs), all(sub in FIXED for sub, _ in subs))
                 for cw, subs in terms)


class Ranking:
    """Ranks one scheduler's queue; remembers each waiting job's fixed components."""

    def __init__(self, config: SchedulerConfig, fs: Fairshare) -> None:
        self.config, self.fs = config, fs
        self.terms = _compile(weighted_terms(config))
        #: job id -> (the job, per component its weighted value if fixed, else None)
        self.memo: dict[str, tuple[Job, tuple[float | None, ...]]] = {}

    def forget(self, job_id: str) -> None:
        """The job left the queue."""
        self.memo.pop(job_id, None)

    def rank(self, jobs: list[Job], seq: dict[str, int], now: float,
             others_prioritized: bool = False) -> list[Job]:
        """:func:`~grid_tasks.maui.priority.prioritize` of ``jobs``.  ``others_prioritized``: queued jobs left out
        of ``jobs`` carry a system priority (so the order is by score, as with them)."""
        if self.config.fifo and not others_prioritized and not any(j.priority for j in jobs):
            return sorted(jobs, key=lambda j: (j.submit_time, seq[j.id]))
        return self._by_score(jobs, seq, now)

    def _by_score(self, jobs: list[Job], seq: dict[str, int], now: float) -> list[Job]:
        if len(jobs) >= VECTOR_FROM:
            scores = self.vector_scores(jobs, now)
            order = np.lexsort((np.fromiter((seq[j.id] for j in jobs), np.int64, len(jobs)), -scores))
            return [jobs[i] for i in order.tolist()]
        scored = [(-s, seq[j.id], j) for s, j in zip(self.scores(jobs, now), jobs)]
        scored.sort(key=lambda x: (x[0], x[1]))
        return [j for _, _, j in scored]

    def _fixed(self, job: Job, now: float) -> tuple[float | None, ...]:
        hit = self.memo.get(job.id)
        if hit is None or hit[0] is not job:
            out: list[float | None] = []
            for cw, subs, fixed in self.terms:
                part = 0.0
                if fixed:
                    for _, fn, sw in subs:
                        part += sw * fn(job, now, self.config, self.fs)
                out.append(cw * part if fixed else None)
            hit = self.memo[job.id] = (job, tuple(out))
        return hit[1]

    def score(self, job: Job, now: float) -> float:
        """:func:`grid_tasks.maui.priority.score`, the same float."""
        config, fs = self.config, self.fs
        total = 0.0
        for (cw, subs, _), fixed in zip(self.terms, self._fixed(job, now)):
            if fixed is None:
                part = 0.0
                for _, fn, sw in subs:
                    part += sw * fn(job, now, config, fs)
                total += cw * part
            else:
                total += fixed
        return total + job.priority

    def scores(self, jobs: Sequence[Job], now: float) -> list[float]:
        """Every job's :meth:`score` (the same floats), a fairshare subcomponent worked
        out once per credential name rather than once per job."""
        config, fs, terms = self.config, self.fs, self.terms
        known: dict[tuple[str, object], float] = {}
        out = []
        for job in jobs:
            total = 0.0
            for (cw, subs, _), fixed in zip(terms, self._fixed(job, now)):
                if fixed is None:
                    part = 0.0
                    for sub, fn, sw in subs:
                        attr = _FS_ATTRS.get(sub)
                        if sub == "QUEUETIME":  # RAW's functions, inlined: the same floats
                            value = max(0.0, now - job.submit_time) / 60.0
                        elif sub == "XFACTOR":
                            value = (max(0.0, now - job.submit_time) + job.walltime) / job.walltime
                        elif attr is None:
                            value = fn(job, now, config, fs)
                        else:
                            key = (sub, getattr(job, attr))
                            value = known.get(key)
                            if value is None:
                                value = known[key] = fn(job, now, config, fs)
                        part += sw * value
                    total += cw * part
                else:
                    total += fixed
            out.append(total + job.priority)
        return out

    def vector_scores(self, jobs: Sequence[Job], now: float) -> np.ndarray:
        """Every job's :meth:`score`, column-wise, in the same order of operations."""
        n = len(jobs)
        self._fill(jobs, now)
        memo = self.memo
        fixed = [memo[j.id][1] for j in jobs]
        total = np.zeros(n)
        for k, (cw, subs, is_fixed) in enumerate(self.terms):
            if is_fixed:
                total = total + np.fromiter((f[k] for f in fixed), float, n)
                continue
            part = np.zeros(n)
            for sub, fn, sw in subs:
                part = part + sw * self._column(sub, fn, jobs, now)
            total = total + cw * part
        return total + np.fromiter((j.priority for j in jobs), float, n)

    def _fill(self, jobs: Sequence[Job], now: float) -> None:
        """Memo entries for the jobs that have none, column-wise (the first ranking of a
        big queue would otherwise weigh every job's credentials and size one by one)."""
        memo = self.memo
        new = [j for j in jobs if (hit := memo.get(j.id)) is None or hit[0] is not j]
        if not new:
            return
        n = len(new)
        cols: list[Iterable[float | None]] = []
        for cw, subs, fixed in self.terms:
            if not fixed:
                cols.append(repeat(None, n))
                continue
            part = np.zeros(n)
            for _, fn, sw in subs:
                part = part + sw * np.fromiter((fn(j, now, self.config, self.fs) for j in new), float, n)
            cols.append((cw * part).tolist())
        rows = zip(*cols) if cols else repeat((), n)
        memo.update(zip((j.id for j in new), zip(new, rows)))

    def _column(self, sub: str, fn: RawFn, jobs: Sequence[Job], now: float) -> np.ndarray:
        """One changing subcomponent for every job (fairshare once per credential name)."""
        n = len(jobs)
        if sub in ("QUEUETIME", "XFACTOR"):
            queued = np.maximum(0.0, now - np.fromiter((j.submit_time for j in jobs), float, n))
            if sub == "QUEUETIME":
                return queued / 60.0
            wall = np.fromiter((j.walltime for j in jobs), float, n)
            return (queued + wall) / wall
        if sub.startswith("FS"):
            attr = _CREDENTIAL_ATTRS[sub[2:]]
            names = [getattr(j, attr) for j in jobs]
            first = {name: job for name, job in zip(names, jobs)}  # one job per name
            value = {name: fn(job, now, self.config, self.fs) for name, job in first.items()}
            return np.fromiter((value[name] for name in names), float, n)
        return np.fromiter((fn(j, now, self.config, self.fs) for j in jobs), float, n)
