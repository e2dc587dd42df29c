"""What a scheduler derives from a deep idle queue, kept from one iteration to the next.

The live shell builds a fresh :class:`~grid_tasks.maui.Scheduler` every iteration
(its state is SQL's), and with 100,000 idle jobs deriving the same facts about the
same jobs again - whether each could ever start, its fixed priority components, the
columns the ranking scores - cost most of every iteration.  Like Maui's job table,
a :class:`QueueCache` keeps them between iterations for one resource manager:

* ``judged`` and ``judged_ok``: the last list of jobs loaded and, aligned with it,
  :class:`~grid_tasks.maui.ever.EverStart` of each (a boolean array: no object per job),
  valid while the nodes (their shapes and usable states) and the policy are those of
  ``key``; a new list takes the verdicts of the very objects it shares with it
  (:func:`positions`, by the identities kept in ``judged_ids``) and asks only for the
  others;
* ``memo``: the ranking's fixed components per job scored one by one (a queue scored
  column-wise keeps them in ``columns`` only; :class:`~grid_tasks.maui.ranking.Ranking`),
  valid for the policy of ``key``;
* ``columns``: the ranking's per-job columns for the last list of ranked jobs, reused
  when the same job objects come again in the same order.

Every entry is tied to the job *object* it was derived from (``is``, never ``==``):
the shell hands a new object for any job whose row changed, so a changed job is
derived anew, and a stale entry can never be used for it.  The decisions are the
same floats and the same order as without the cache (tests/maui/test_queue_cache.py).
Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import numpy as np

from grid_tasks.maui.model import Job, Node, SchedulerError

_ID = attrgetter("id")


def nodes_key(nodes: Any) -> tuple:
    """What classification depends on in the nodes: shape, features, usable or not."""
    return tuple((n.name, n.procs, n.memory, n.disk, n.swap, n.features, n.usable)
                 for n in nodes)


@dataclass
class QueueCache:
    """One RM's derived idle-queue facts (see the module docstring)."""

    key: tuple = ()
    config: Any = None
    judged: list[Job] = field(default_factory=list)  # the jobs of judged_ok, in its order
    judged_ok: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    judged_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint64))
    #: (a list judged whole, each job's shape number, one job per shape: by_shape), so
    #: the ranking weighs the same jobs' fixed components per shape without asking again
    shaped: tuple[list[Job], list[int], list[Job]] | None = None
    memo: dict[str, tuple[Job, tuple[float | None, ...]]] = field(default_factory=dict)
    columns: Any = None  # the ranking's (jobs, arrays) of its last vector scoring
    jobs: list[Job] = field(default_factory=list)  # the last queue loaded
    #: (that list, the idle queue's jobs, ready jobs, parked ones with a priority, the
    #: ready list when every ready job is feasible) as IdleQueue.load left them
    loaded: Any = None
    numbered: Any = None  # (that list, the first number, job id -> number)

    def bind(self, config: Any, nodes: list[Node]) -> None:
        """Use the cache for a scheduler of ``config`` over ``nodes``: what was derived
        under another policy or other nodes is dropped."""
        key = nodes_key(nodes)
        if config is not self.config:
            self.memo, self.columns = {}, None
        if config is not self.config or key != self.key:
            self.judged, self.judged_ok, self.loaded = [], np.zeros(0, dtype=bool), None
            self.judged_ids, self.shaped = np.zeros(0, dtype=np.uint64), None
        self.config, self.key = config, key

    def numbering(self, jobs: list[Job], first: int) -> dict[str, int]:
        """Job id -> submission number from ``first`` on, in list order (kept for the
        same list and ``first``); SchedulerError when a job is listed twice."""
        kept = self.numbered
        if kept is not None and kept[0] is jobs and kept[1] == first:
            return kept[2]
        self.numbered = None  # (freed before the new one is built: a lower peak)
        seq = dict(zip(map(_ID, jobs), range(first, first + len(jobs))))
        if len(seq) != len(jobs):
            raise SchedulerError("a job is listed twice")
        self.numbered = (jobs, first, seq)
        return seq

    def ids_of(self, jobs: list[Job]) -> list[str]:
        """The jobs' ids in list order (the numbering's keys, when it numbered them)."""
        kept = self.numbered
        if kept is not None and kept[0] is jobs and len(kept[2]) == len(jobs):
            return list(kept[2])
        return list(map(_ID, jobs))

    def prune(self, jobs: list[Job]) -> None:
        """Forget jobs no longer queued, once they are a quarter of what is kept."""
        if jobs is self.jobs:
            return
        self.jobs = jobs
        slack = len(jobs) + len(jobs) // 4 + 100  # (not a pass over the queue per change)
        if len(self.memo) <= slack:
            return
        ids = {j.id for j in jobs}
        self.memo = {k: v for k, v in self.memo.items() if k in ids}


def identities(jobs: Sequence[Job]) -> np.ndarray:
    """The objects' identities (``id()``) as a column, to match lists by object."""
    return np.fromiter(map(id, jobs), np.uint64, len(jobs))


def positions(old: np.ndarray, new: Sequence[Job]) -> tuple[np.ndarray, np.ndarray]:
    """For each job of ``new``, the position of that very object in the list whose
    :func:`identities` are ``old``, else -1; and ``new``'s identities (kept by the
    caller for the next match).  Matched through sorted columns: a dict of 100,000
    int keys per change cost time and left memory fragmented.  The old list must be
    alive (held by the caller): no address of one of its objects is reused then."""
    news = identities(new)
    if not len(old) or not len(new):
        return np.full(len(new), -1, dtype=np.int64), news
    sorter = np.argsort(old, kind="stable")
    at = np.minimum(np.searchsorted(old[sorter], news), len(old) - 1)
    hit = old[sorter[at]] == news
    return np.where(hit, sorter[at], -1).astype(np.int64), news
