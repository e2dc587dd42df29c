"""Ranking the idle queue every iteration, fast, with exactly :func:`prioritize`'s order.

A site's queue can hold thousands of idle jobs and the scheduler ranks all of them
every iteration.  Two things make that cheap without changing a single score:

* what cannot change while a job waits (credential priorities, size) is weighted
  once per job and kept until the job leaves the queue: in a memo when scored one
  by one, in the kept columns when scored column-wise;
* a big queue is scored column-wise with numpy: IEEE-754 addition, multiplication
  and division are correctly rounded in numpy as in Python, and every column is
  summed in :func:`grid_tasks.maui.priority.score`'s order, so each score is the
  same float and the order (score, then submission) the same list.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from typing import Any, Sequence

import numpy as np

from grid_tasks.maui.config import SchedulerConfig
from grid_tasks.maui.model import Job, by_shape
from grid_tasks.maui.queue_cache import identities, positions
from grid_tasks.maui.priority import (
    _CREDENTIAL_ATTRS, FIXED, RAW, Fairshare, RawFn, Terms, weighted_terms,
)

_ID, _PRIORITY, _SUBMIT, _WALL, _TASKS, _PER_TASK = map(attrgetter, (
    "id", "priority", "submit_time", "walltime", "tasks", "procs_per_task"))

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
        self.cache: Any = None  # a QueueCache shared between schedulers (see share)
        self.last: tuple[list[Job], np.ndarray, Any] | None = None  # see shape_of

    def shape_of(self, ranked: list[Job]) -> tuple[np.ndarray, np.ndarray] | None:
        """(processors, walltime) columns of ``ranked`` in its order, when it is the
        list the last vector ranking returned with shared columns; else None."""
        last = self.last
        if last is None or last[0] is not ranked or last[2] is None:
            return None
        _, order, cols = last
        return cols.procs[order], cols.wall[order]

    def forget(self, job_id: str) -> None:
        """The job left the queue."""
        self.memo.pop(job_id, None)

    def rank(self, jobs: list[Job], seq: dict[str, int], now: float,
             others_prioritized: bool = False, by_position: bool = False) -> list[Job]:
        """:func:`~grid_tasks.maui.priority.prioritize` of ``jobs``.  ``others_prioritized``: queued jobs left out
        of ``jobs`` carry a system priority (so the order is by score, as with them).
        ``by_position``: ``jobs`` are in submission (``seq``) order, so equal scores keep
        their positions (the same order, without reading ``seq``)."""
        if self.config.fifo and not others_prioritized and not any(map(_PRIORITY, jobs)):
            return self._by_submission(jobs, seq, by_position)
        return self._by_score(jobs, seq, now, by_position)

    @staticmethod
    def _by_submission(jobs: list[Job], seq: dict[str, int], by_position: bool) -> list[Job]:
        """FIFO: by submission time, then ``seq`` (a deep queue column-wise: a key
        tuple per job cost 0.27 s of a 100,000-job plan)."""
        if len(jobs) < VECTOR_FROM:
            return sorted(jobs, key=lambda j: (j.submit_time, seq[j.id]))
        submit = np.fromiter(map(_SUBMIT, jobs), float, len(jobs))
        if by_position:  # a stable sort keeps equal times in seq order
            order = np.argsort(submit, kind="stable")
        else:
            order = np.lexsort((np.fromiter(map(seq.__getitem__, map(_ID, jobs)), np.int64,
                                            len(jobs)), submit))
        return list(itemgetter(*order.tolist())(jobs))

    def walltimes_of(self, ranked: list[Job]) -> tuple[float, ...] | None:
        """The distinct walltimes of ``ranked`` when it is the last vector ranking's
        list (kept with its columns); else None."""
        last = self.last
        if last is None or last[0] is not ranked or last[2] is None:
            return None
        cols = last[2]
        if cols.walls is None:  # (distinct values sorted; np.unique imported numpy.ma)
            wall = np.sort(cols.wall)
            cols.walls = tuple(wall[np.concatenate(([True], wall[1:] != wall[:-1]))].tolist()
                               if len(wall) else ())
        return cols.walls

    def _by_score(self, jobs: list[Job], seq: dict[str, int], now: float,
                  by_position: bool = False) -> list[Job]:
        if len(jobs) >= VECTOR_FROM:
            scores = self.vector_scores(jobs, now)
            if by_position:  # a stable sort keeps equal scores in seq order
                order = np.argsort(-scores, kind="stable")
            else:
                ids = map(_ID, jobs)
                order = np.lexsort((np.fromiter(map(seq.__getitem__, ids), np.int64, len(jobs)),
                                    -scores))
            ranked = list(itemgetter(*order.tolist())(jobs))  # (at least VECTOR_FROM jobs)
            self.last = (ranked, order, self.cache.columns if self.cache is not None else None)
            return ranked
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

    def share(self, cache: Any) -> None:
        """Keep the fixed components and the score columns in ``cache`` (a
        :class:`~grid_tasks.maui.queue_cache.QueueCache` bound to this policy), so the
        next scheduler ranking the same jobs derives none of them again."""
        self.memo, self.cache = cache.memo, cache

    def vector_scores(self, jobs: Sequence[Job], now: float) -> np.ndarray:
        """Every job's :meth:`score`, column-wise, in the same order of operations."""
        n = len(jobs)
        cols = self._columns(jobs, now)
        total = np.zeros(n)
        for k, (cw, subs, is_fixed) in enumerate(self.terms):
            if is_fixed:
                total = total + cols.fixed[k]
                continue
            part = np.zeros(n)
            for sub, fn, sw in subs:
                part = part + sw * self._column(sub, fn, jobs, now, cols)
            total = total + cw * part
        return total + cols.priority

    def _columns(self, jobs: Sequence[Job], now: float) -> "_Columns":
        """The columns of ``jobs`` that do not change while they wait (kept in the
        shared cache: for the same jobs in the same order they are reused, for another
        list the kept jobs' values are carried over and only new jobs are weighed)."""
        cache = self.cache
        old = cache.columns if cache is not None else None
        if old is not None and old.jobs == jobs:
            return old  # (list ==: the same objects, or equal ones)
        cols = self._build(jobs, now) if old is None else self._carry(old, jobs, now)
        if cache is not None:
            cache.columns = cols
        return cols

    def _build(self, jobs: Sequence[Job], now: float) -> "_Columns":
        """Columns of ``jobs``, the fixed components weighed column-wise and kept only
        in the columns (not in the per-job memo: with 100,000 jobs its entries cost
        more memory than the jobs; the same floats, see :meth:`_fixed_column`)."""
        n = len(jobs)
        cols = _Columns(list(jobs), {}, np.fromiter(map(_PRIORITY, jobs), float, n),
                        np.fromiter(map(_SUBMIT, jobs), float, n),
                        np.fromiter(map(_WALL, jobs), float, n),
                        np.fromiter(map(_TASKS, jobs), float, n)
                        * np.fromiter(map(_PER_TASK, jobs), float, n),  # (Job.procs)
                        identities(jobs))
        shapes: tuple[list[Job], np.ndarray] | None = None
        for k, (cw, subs, is_fixed) in enumerate(self.terms):
            if is_fixed:
                shapes = shapes or _shapes(jobs, self.cache)
                cols.fixed[k] = self._fixed_column(shapes, now, cw, subs)
        return cols

    def _fixed_column(self, shapes: tuple[list[Job], np.ndarray], now: float, cw: float,
                      subs: tuple[tuple[str, RawFn, float], ...]) -> np.ndarray:
        """One fixed component of every job: :meth:`_fixed`'s sum, in its order
        (0.0 plus each weighted subcomponent, then the component weight), column-wise,
        each subcomponent worked out once per job shape (:func:`by_shape`: all a
        fixed one reads)."""
        reps, index = shapes
        part = np.zeros(len(index))
        for _, fn, sw in subs:
            value = np.fromiter((fn(j, now, self.config, self.fs) for j in reps), float,
                                len(reps))
            part = part + sw * value[index]
        return cw * part

    def _carry(self, old: "_Columns", jobs: Sequence[Job], now: float) -> "_Columns":
        """Columns of ``jobs`` from ``old`` (matched by job object) and the new jobs'."""
        src, ids = positions(old.ids, jobs)
        new_at = np.flatnonzero(src < 0)
        fresh = self._build([jobs[i] for i in new_at.tolist()], now)
        take = np.where(src < 0, 0, src)

        def merge(kept: np.ndarray, added: np.ndarray) -> np.ndarray:
            out = kept[take] if len(kept) else np.zeros(len(jobs))
            out[new_at] = added
            return out

        cols = _Columns(list(jobs), {k: merge(v, fresh.fixed[k]) for k, v in old.fixed.items()},
                        merge(old.priority, fresh.priority), merge(old.submit, fresh.submit),
                        merge(old.wall, fresh.wall), merge(old.procs, fresh.procs), ids)
        for sub, (reps, index, first) in old.names.items():
            reps, first = list(reps), dict(first)
            attr = _CREDENTIAL_ATTRS[sub[2:]]
            for job in fresh.jobs:
                if getattr(job, attr) not in first:
                    first[getattr(job, attr)] = len(reps)
                    reps.append(job)
            added = np.fromiter((first[getattr(j, attr)] for j in fresh.jobs), np.int64,
                                len(fresh.jobs))
            cols.names[sub] = (reps, merge(index, added).astype(np.int64), first)
        return cols

    def _column(self, sub: str, fn: RawFn, jobs: Sequence[Job], now: float,
                cols: "_Columns") -> np.ndarray:
        """One changing subcomponent for every job (fairshare once per credential name)."""
        n = len(jobs)
        if sub in ("QUEUETIME", "XFACTOR"):
            queued = np.maximum(0.0, now - cols.submit)
            if sub == "QUEUETIME":
                return queued / 60.0
            return (queued + cols.wall) / cols.wall
        if sub.startswith("FS"):
            names = cols.names.get(sub)
            if names is None:
                names = cols.names[sub] = _names(jobs, _CREDENTIAL_ATTRS[sub[2:]])
            reps, index, _ = names
            value = np.fromiter((fn(job, now, self.config, self.fs) for job in reps), float,
                                len(reps))
            return value[index]
        return np.fromiter((fn(j, now, self.config, self.fs) for j in jobs), float, n)


def _names(jobs: Sequence[Job], attr: str) -> tuple[list[Job], np.ndarray, dict[object, int]]:
    """One job per credential name ``attr`` of ``jobs`` (the first that has it), each
    job's name's position there, and name -> position (at C speed: no step per job)."""
    names = list(map(attrgetter(attr), jobs))
    first = {name: k for k, name in enumerate(dict.fromkeys(names))}
    reps = dict(zip(reversed(names), reversed(jobs)))  # (the first job of each name)
    return ([reps[name] for name in first],
            np.fromiter(map(first.__getitem__, names), np.int64, len(names)), first)


def _shapes(jobs: Sequence[Job], cache: Any) -> tuple[list[Job], np.ndarray]:
    """One job per distinct job shape of ``jobs``, and the position of each job's
    shape there (the cache's, when it judged these very jobs whole)."""
    shaped = cache.shaped if cache is not None else None
    if shaped is not None and len(shaped[0]) == len(jobs) and shaped[0] == jobs:
        _, shapes, reps = shaped  # (list ==: the same objects, element by element)
    else:
        shapes, reps = by_shape(jobs)
    return reps, np.array(shapes, dtype=np.int64)


@dataclass
class _Columns:
    """Per-job columns of one ranked list: fixed components by term index, system
    priority, submission time, walltime, fairshare credential (representatives, index)."""

    jobs: list[Job]
    fixed: dict[int, np.ndarray]
    priority: np.ndarray
    submit: np.ndarray
    wall: np.ndarray
    procs: np.ndarray
    ids: np.ndarray  # the jobs' identities (queue_cache.identities), to match the next list
    walls: tuple[float, ...] | None = None  # the distinct walltimes (see walltimes_of)
    #: per fairshare subcomponent: (one job per credential name, each job's name's
    #: position there, name -> position)
    names: dict[str, tuple[list[Job], np.ndarray, dict[object, int]]] = field(default_factory=dict)
