"""The book-keeping of one priority pass, and when the pass may stop early.

A deep queue under a full machine would otherwise cost one fit test per waiting job
in every iteration; the stop test answers for all the jobs left at once, from the
free-processors curve, and is exact (tests/maui/test_early_stop.py compares it with
full passes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from grid_tasks.maui.model import Job

if TYPE_CHECKING:  # pragma: no cover
    from grid_tasks.maui.scheduler import Scheduler


class PassStop:
    """Whether a priority pass can stop early: every reservation it may make is made
    and no later job could start now: no processor is free
    (:meth:`Scheduler.nothing_free`), or each job left asks more processors than stay
    free for its walltime, counting the holds it may use (:meth:`Scheduler._fit_now`'s
    first test).  Then no later job could start, be
    picked for backfill or get a reservation.  Never while a reservation of an
    earlier pass begins by now: its job starts in processors the check sees taken."""

    def __init__(self, sched: "Scheduler", now: float, order: list[Job],
                 offsets: tuple[float, ...]) -> None:
        depth = sched.queue_policy.depth
        self.sched, self.now, self.depth, self.order = sched, now, depth, order
        self.offsets = offsets  # the walltimes of this pass's queue (the curve's steps)
        self.possible = depth is not None and all(
            pl.start > now for pl in sched.job_res.values())
        self.full, self.seen = False, -1  # nothing_free as of ``seen`` starts
        self.fits_at = -1  # a job at or after this position might fit (as of ``seen``)
        self.shape: Any = None  # (processors, walltime) columns of order, when ranked so

    def __call__(self, p: "Pass", started: int, i: int) -> bool:
        if not self.possible or p.held < self.depth:
            return False
        if started != self.seen:  # only a start can take the last free processor
            self.full, self.seen, self.fits_at = self.sched.nothing_free(self.now), started, -1
        if self.full:
            return True
        if i <= self.fits_at:
            return False
        self.fits_at = self._first_fitting(i)
        return self.fits_at < 0

    def _first_fitting(self, i: int) -> int:
        """Position of the first job from ``i`` on that passes _fit_now's processor
        test (-1: none does)."""
        sched = self.sched
        eng = sched.engine
        now = self.now
        curve = eng.capacity(now, self.offsets)
        if not eng.holds:  # no hold lends processors: one test per distinct walltime
            if self.shape is None:
                self.shape = sched.ranking.shape_of(self.order) or (False, False)
            if self.shape[0] is not False:
                return _first_at_most(self.shape, i, curve)
        order = self.order
        for k in range(i, len(order)):
            job = order[k]
            holds = eng.accessible(job)
            end = now + job.walltime
            bonus = sum(h.size for h in holds if h.res.start < end and h.res.end > now) if holds else 0
            if job.procs <= curve.free_for(job.walltime) + bonus:
                return k
        return -1


def _first_at_most(shape: tuple[np.ndarray, np.ndarray], i: int, curve: Any) -> int:
    """The first position from ``i`` whose processors fit what stays free for its
    walltime (the scalar test of :meth:`PassStop._first_fitting`, column-wise); -1: none."""
    procs, walls = shape[0][i:], shape[1][i:]
    if not len(procs):
        return -1
    uniq, inverse = np.unique(walls, return_inverse=True)
    free = np.array([curve.free_for(w) for w in uniq.tolist()], dtype=float)
    fits = procs <= free[inverse]
    k = int(np.argmax(fits))
    return i + k if fits[k] else -1


@dataclass
class Pass:
    """Book-keeping of one priority pass."""

    held: int
    floor: float | None
    blocked: bool = False
    deferred: list[Job] = field(default_factory=list)
    picks: list[Job] = field(default_factory=list)
