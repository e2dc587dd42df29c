"""Backfill policies (BACKFILLPOLICY): which jobs may start ahead of a blocked one, and
in what order.

The priority pass asks three questions of the policy: may anything overtake a blocked
job at all (``backfills``); does a job that fits start on the spot, in priority order
(``at_once``, FIRSTFIT), or is it collected and the collection ordered after the pass
(:meth:`Backfill.order`, BESTFIT and GREEDY).  Reservations are protected by the
placement engine either way, so a policy only chooses among jobs that fit now.
BESTFIT and GREEDY rank by BACKFILLMETRIC (:mod:`grid_tasks.maui.policies.metric`).
"""

from __future__ import annotations

from typing import Callable, ClassVar

from grid_tasks.maui.config import BackfillPolicy
from grid_tasks.maui.model import Job
from grid_tasks.maui.policies.metric import Metric
from grid_tasks.maui.policies.registry import lookup


def _procs(job: Job) -> float:
    return float(job.procs)


class Backfill:
    """Base: backfilling allowed, fitting jobs collected and started in priority order."""

    kind: ClassVar[BackfillPolicy]
    #: later jobs may start while a higher-priority one waits
    backfills: ClassVar[bool] = True
    #: a job that fits starts during the pass (else it is collected for :meth:`order`)
    at_once: ClassVar[bool] = False

    def __init__(self, metric: Metric = _procs) -> None:
        #: BACKFILLMETRIC: a job's worth to the window (BESTFIT and GREEDY rank by it)
        self.metric = metric

    def order(self, picks: list[Job], free_now: Callable[[], int]) -> list[Job]:
        """The collected jobs in the order their starts are tried; ``free_now`` gives
        the processors free at this moment (computed only when a policy asks)."""
        return picks


class FirstFit(Backfill):
    """FIRSTFIT: every job that fits starts at once, in priority order."""

    kind = BackfillPolicy.FIRSTFIT
    at_once = True


class BestFit(Backfill):
    """BESTFIT: the fitting job with the largest metric first (ties in priority order),
    so the holes are filled by few, large (or long) jobs."""

    kind = BackfillPolicy.BESTFIT

    def order(self, picks: list[Job], free_now: Callable[[], int]) -> list[Job]:
        metric = self.metric
        return sorted(picks, key=lambda j: -metric(j))


class Greedy(Backfill):
    """GREEDY: the subset of the first ``window`` candidates whose metrics add up highest
    within the free processors (a knapsack over processors; with PROCS, the subset that
    fills the processors best), then the rest in order."""

    kind = BackfillPolicy.GREEDY
    window: ClassVar[int] = 64  # bounds the subset-sum: at most window x free states

    def order(self, picks: list[Job], free_now: Callable[[], int]) -> list[Job]:
        head = picks[:self.window]
        return self.knapsack(head, free_now(), self.metric) + picks[self.window:]

    @staticmethod
    def knapsack(jobs: list[Job], free: int, metric: Metric = _procs) -> list[Job]:
        """Chosen jobs first (in candidate order), the others after them.

        One state per processor count reachable (at most window x free states): the
        best metric sum using exactly that many, replaced only by a strictly better one,
        so earlier candidates win ties."""
        best: dict[int, tuple[float, tuple[int, ...]]] = {0: (0.0, ())}
        for i, job in enumerate(jobs):
            worth = metric(job)
            for used, (value, chosen) in list(best.items()):
                total = used + job.procs
                if total <= free and (total not in best or value + worth > best[total][0]):
                    best[total] = (value + worth, chosen + (i,))
        _, chosen = max(best.values(), key=lambda entry: entry[0])
        return [jobs[i] for i in chosen] + [j for i, j in enumerate(jobs) if i not in chosen]


class NoBackfill(Backfill):
    """NONE: nobody overtakes a blocked job (strict priority order)."""

    kind = BackfillPolicy.NONE
    backfills = False


BACKFILL_POLICIES: dict[BackfillPolicy, type[Backfill]] = {
    cls.kind: cls for cls in (FirstFit, BestFit, Greedy, NoBackfill)
}


def backfill_policy(name: BackfillPolicy | str, metric: Metric = _procs) -> Backfill:
    """The backfill policy BACKFILLPOLICY ``name``, ranking by ``metric``."""
    return lookup(BACKFILL_POLICIES, "BACKFILLPOLICY", name)(metric)
