"""What a scheduler derives from a deep idle queue, kept from one iteration to the next.

The live shell builds a fresh :class:`~grid_tasks.maui.Scheduler` every iteration
(its state is SQL's), and with 100,000 idle jobs deriving the same facts about the
same jobs again - whether each could ever start, its fixed priority components, the
columns the ranking scores - cost most of every iteration.  Like Maui's job table,
a :class:`QueueCache` keeps them between iterations for one resource manager:

* ``verdicts``: :meth:`Scheduler._may_ever_start` per job (the jobs that may start
  in ``verdicts``, the others in ``never``: no tuple per job), valid while the nodes
  (their shapes and usable states) and the policy are those of ``key``;
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

from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

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
    verdicts: dict[str, Job] = field(default_factory=dict)  # may start
    never: dict[str, Job] = field(default_factory=dict)  # may never start
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
            self.verdicts, self.never, self.loaded = {}, {}, None
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

    def prune(self, jobs: list[Job]) -> None:
        """Forget jobs no longer queued, once they are a quarter of what is kept."""
        if jobs is self.jobs:
            return
        self.jobs = jobs
        slack = len(jobs) + len(jobs) // 4 + 100  # (not a pass over the queue per change)
        if len(self.verdicts) + len(self.never) <= slack and len(self.memo) <= slack:
            return
        ids = {j.id for j in jobs}
        self.verdicts = {k: v for k, v in self.verdicts.items() if k in ids}
        self.never = {k: v for k, v in self.never.items() if k in ids}
        self.memo = {k: v for k, v in self.memo.items() if k in ids}
