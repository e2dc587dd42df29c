"""Comparing replays honestly: every policy measured on the same jobs.

A policy that leaves jobs unfinished (a throttle below their size, say) is measured
on fewer jobs than the others, and the ones it drops are usually the hard ones: its
mean wait looks best and its wait CDF still climbs to 1.  So a comparison computes
its headline metrics on the **common set** — the measured jobs every policy
finished, identified by (cluster, job id) — and shows each policy's figures on its
own finished jobs only beside them, labelled as such, with the unfinished counts.

Pure: results in, summaries out.  When every policy finished every job the common
set is each run's own set, in the same order, so the figures are identical to the
single-run ones to the last digit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from grid_tasks.sim.conventions import SimJob
from grid_tasks.sim.metrics import Summary, summarize

__all__ = ["Comparison", "compare", "job_key", "basis_line"]


def job_key(job: SimJob) -> tuple[str, str]:
    """A job's identity across replays of the same traces."""
    return (job.cluster, job.id)


def _measured(jobs: Sequence[SimJob]) -> list[SimJob]:
    return [j for j in jobs if j.measured and j.end >= 0]


@dataclass
class Comparison:
    """Policies side by side: who left what unfinished, and the metrics on which set.

    ``common_jobs[label]`` are the run's own job objects of the common set (in the
    run's finishing order), for plots; ``common[label]`` their metrics (None when the
    common set is empty).
    """

    labels: list[str]
    procs: int
    common_size: int
    unfinished: dict[str, int]
    measured: dict[str, int]
    own: dict[str, Summary | None]
    common: dict[str, Summary | None]
    common_jobs: dict[str, list[SimJob]]

    @property
    def same_jobs(self) -> bool:
        """True when every policy finished the same measured jobs (nothing to caveat)."""
        return all(n == self.common_size for n in self.measured.values()) and \
            not any(self.unfinished.values())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the basis, then per policy its unfinished count and common metrics."""
        return {"basis": "jobs every policy finished", "common_jobs": self.common_size,
                "unfinished": dict(self.unfinished),
                "common": {k: (s.headline() if s is not None else None)
                           for k, s in self.common.items()}}


def compare(runs: Sequence[tuple[str, Sequence[SimJob], int, Summary | None]],
            procs: int) -> Comparison:
    """Compare ``(label, finished jobs, unfinished count, own summary)`` runs of the same
    traces on ``procs`` processors in all."""
    measured = {label: _measured(jobs) for label, jobs, _, _ in runs}
    keys: set[tuple[str, str]] | None = None
    for jobs in measured.values():
        mine = {job_key(j) for j in jobs}
        keys = mine if keys is None else keys & mine
    keys = keys or set()
    common_jobs = {label: [j for j in jobs if job_key(j) in keys]
                   for label, jobs in measured.items()}
    return Comparison(
        labels=[label for label, *_ in runs], procs=procs, common_size=len(keys),
        unfinished={label: unfinished for label, _, unfinished, _ in runs},
        measured={label: len(jobs) for label, jobs in measured.items()},
        own={label: summary for label, _, _, summary in runs},
        common={label: summarize(jobs, procs) if jobs else None
                for label, jobs in common_jobs.items()},
        common_jobs=common_jobs)


def basis_line(cmp: Comparison) -> str:
    """The sentence printed above a comparison: which jobs the figures are computed on."""
    left = ", ".join(f"{label} {cmp.unfinished[label]:,}" for label in cmp.labels)
    if cmp.same_jobs:
        return (f"Every policy finished the same {cmp.common_size:,} measured jobs; "
                f"unfinished jobs: {left}.")
    return (f"Metrics on the {cmp.common_size:,} measured jobs EVERY policy finished (the "
            f"common set); jobs left unfinished: {left}. Each policy's figures on its own "
            "finished jobs follow, not comparable across policies.")
