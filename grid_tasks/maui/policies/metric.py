"""BACKFILLMETRIC: what BESTFIT and GREEDY maximise when they fill a backfill window.

Maui's backfill ranks the jobs that fit now by a metric rather than by priority:
BESTFIT starts the jobs with the largest metric first, GREEDY picks the subset of
candidates whose metrics add up highest within the free processors.  Processors fill
the window now; processor-seconds and seconds also count how long the window stays
filled; processor equivalents (PE) count a job's largest share of any resource,
so a memory-heavy job is valued as the processors its memory keeps others from.
"""

from __future__ import annotations

from math import ceil
from typing import Callable

from grid_tasks.maui.config import BackfillMetric, policy_choice
from grid_tasks.maui.model import Job, Node
from grid_tasks.maui.priority import processor_equivalents

#: a job's worth to the backfill window
Metric = Callable[[Job], float]
#: machine totals of processors, memory, disk and swap
Machine = tuple[float, float, float, float]


def machine_totals(nodes: list[Node]) -> Machine:
    """Configured processors, memory, disk and swap over ``nodes``."""
    return (float(sum(n.procs for n in nodes)), float(sum(n.memory for n in nodes)),
            float(sum(n.disk for n in nodes)), float(sum(n.swap for n in nodes)))


def nodes_asked(job: Job) -> float:
    """Nodes the job asks for: its tasks over TASKS PER NODE, else one per task (the
    most it may spread over; the allocation may pack it onto fewer)."""
    return float(ceil(job.tasks / job.tasks_per_node) if job.tasks_per_node else job.tasks)


def backfill_metric(name: BackfillMetric | str, machine: Machine | None = None) -> Metric:
    """The metric BACKFILLMETRIC ``name`` names (PE needs the ``machine`` totals)."""
    kind = policy_choice(BackfillMetric, "BACKFILLMETRIC", name)
    table: dict[BackfillMetric, Metric] = {
        BackfillMetric.PROCS: lambda job: float(job.procs),
        BackfillMetric.PROCSECONDS: lambda job: float(job.procs) * job.walltime,
        BackfillMetric.SECONDS: lambda job: job.walltime,
        BackfillMetric.PE: lambda job: processor_equivalents(job, machine or (0.0,) * 4),
        BackfillMetric.NODES: nodes_asked,
    }
    return table[kind]
