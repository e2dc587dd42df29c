"""Metrics of a replay: waits, response times, bounded slowdowns, utilization.

Definitions (those of the reference table in the shared workloads README):

* only **measured** jobs count (the ``pyss`` conventions leave broken records out);
* wait = start - submit; run = end - start (the time really held, so a killed
  job counts its walltime); response = wait + run;
* bounded slowdown = max(1, (wait + run) / max(run, threshold)), threshold 10 s;
* utilization = sum(run x processors) / (P x (last end - first submit));
* makespan = last end - first submit.

Percentiles are linear interpolations (numpy's default).  Groups: job-size
classes by processor count (powers of four) and users.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from grid_tasks.errors import GridTasksError
from grid_tasks.sim.conventions import SimJob

__all__ = ["Distribution", "GroupStats", "Summary", "summarize", "size_class",
           "write_jobs", "JOB_COLUMNS", "BSLD_THRESHOLD", "MetricsError"]

BSLD_THRESHOLD = 10.0
PERCENTILES = (50, 90, 95, 99)
# Upper bounds of the job-size classes, in processors.
SIZE_CLASSES = ((1, "1"), (4, "2-4"), (16, "5-16"), (64, "17-64"), (256, "65-256"))


class MetricsError(GridTasksError):
    """Metrics cannot be computed or written (no measured job, bad output name)."""


def size_class(procs: int) -> str:
    """The size-class label of a job using ``procs`` processors."""
    for bound, label in SIZE_CLASSES:
        if procs <= bound:
            return label
    return f"{SIZE_CLASSES[-1][0] + 1}+"


@dataclass
class Distribution:
    """Mean, percentiles and maximum of one per-job quantity."""

    mean: float
    p50: float
    p90: float
    p95: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: np.ndarray) -> Distribution:
        if values.size == 0:
            return cls(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        pct = np.percentile(values, PERCENTILES)
        return cls(float(values.mean()), *(float(p) for p in pct), float(values.max()))


@dataclass
class GroupStats:
    """Aggregates of one group of jobs (a size class or a user)."""

    jobs: int
    mean_wait_s: float
    p90_wait_s: float
    mean_response_s: float
    mean_bsld: float
    proc_seconds: float


@dataclass
class Summary:
    """Everything a replay reports about its measured jobs."""

    procs: int
    jobs_total: int
    jobs_measured: int
    jobs_killed: int
    wait_s: Distribution
    response_s: Distribution
    bsld: Distribution
    utilization: float
    makespan_s: float
    first_submit: float
    last_end: float
    by_size: dict[str, GroupStats] = field(default_factory=dict)
    by_user: dict[str, GroupStats] = field(default_factory=dict)

    @property
    def mean_wait_s(self) -> float:
        return self.wait_s.mean

    @property
    def mean_bsld(self) -> float:
        return self.bsld.mean

    def headline(self) -> dict[str, Any]:
        """The flat figures the CLI's ``--json`` promises."""
        return {
            "jobs_total": self.jobs_total,
            "jobs_measured": self.jobs_measured,
            "jobs_killed": self.jobs_killed,
            "mean_wait_s": self.wait_s.mean,
            "p50_wait_s": self.wait_s.p50,
            "p95_wait_s": self.wait_s.p95,
            "mean_response_s": self.response_s.mean,
            "mean_bsld": self.bsld.mean,
            "p95_bsld": self.bsld.p95,
            "utilization": self.utilization,
            "makespan_s": self.makespan_s,
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the headline plus distributions and groups."""
        out = self.headline()
        out.update(procs=self.procs, first_submit=self.first_submit, last_end=self.last_end,
                   wait=asdict(self.wait_s), response=asdict(self.response_s),
                   bsld_distribution=asdict(self.bsld),
                   by_size={k: asdict(v) for k, v in self.by_size.items()},
                   by_user={k: asdict(v) for k, v in self.by_user.items()})
        return out


def _arrays(jobs: Sequence[SimJob], threshold: float) -> dict[str, np.ndarray]:
    submit = np.fromiter((j.submit for j in jobs), float, len(jobs))
    start = np.fromiter((j.start for j in jobs), float, len(jobs))
    end = np.fromiter((j.end for j in jobs), float, len(jobs))
    procs = np.fromiter((j.procs for j in jobs), float, len(jobs))
    wait = start - submit
    run = end - start
    response = wait + run
    bsld = np.maximum(1.0, response / np.maximum(run, threshold))
    return {"submit": submit, "end": end, "procs": procs, "wait": wait, "run": run,
            "response": response, "bsld": bsld}


def _group(arrays: dict[str, np.ndarray], labels: list[str]) -> dict[str, GroupStats]:
    index: dict[str, list[int]] = {}
    for i, label in enumerate(labels):
        index.setdefault(label, []).append(i)
    out = {}
    for label, rows in index.items():
        sel = np.asarray(rows)
        wait = arrays["wait"][sel]
        out[label] = GroupStats(
            jobs=len(rows), mean_wait_s=float(wait.mean()),
            p90_wait_s=float(np.percentile(wait, 90)),
            mean_response_s=float(arrays["response"][sel].mean()),
            mean_bsld=float(arrays["bsld"][sel].mean()),
            proc_seconds=float((arrays["run"][sel] * arrays["procs"][sel]).sum()))
    return out


def _size_order(label: str) -> int:
    return int(label.split("-")[0].rstrip("+"))


def summarize(jobs: Iterable[SimJob], procs: int, *,
              threshold: float = BSLD_THRESHOLD) -> Summary:
    """Metrics over the finished, measured jobs of a replay on ``procs`` processors."""
    every = list(jobs)
    measured = [j for j in every if j.measured and j.end >= 0]
    if not measured:
        raise MetricsError("no measured job finished: nothing to report")
    a = _arrays(measured, threshold)
    first, last = float(a["submit"].min()), float(a["end"].max())
    span = last - first
    util = float((a["run"] * a["procs"]).sum() / (procs * span)) if span > 0 else 0.0
    sizes = _group(a, [size_class(j.procs) for j in measured])
    users = _group(a, [str(j.user) for j in measured])
    return Summary(
        procs=procs, jobs_total=len(every), jobs_measured=len(measured),
        jobs_killed=sum(1 for j in measured if j.killed),
        wait_s=Distribution.of(a["wait"]), response_s=Distribution.of(a["response"]),
        bsld=Distribution.of(a["bsld"]), utilization=util, makespan_s=span,
        first_submit=first, last_end=last,
        by_size=dict(sorted(sizes.items(), key=lambda kv: _size_order(kv[0]))),
        by_user=dict(sorted(users.items(), key=lambda kv: (-kv[1].proc_seconds, kv[0]))))


JOB_COLUMNS = ("id", "cluster", "user", "group", "queue", "submit", "start", "end", "wait",
               "run", "estimate", "procs", "killed", "measured", "bsld")


def _job_row(job: SimJob, threshold: float) -> tuple[Any, ...]:
    run = job.end - job.start
    wait = job.start - job.submit
    bsld = max(1.0, (wait + run) / max(run, threshold))
    return (job.id, job.cluster, job.user, job.group, job.queue, job.submit, job.start,
            job.end, wait, run, job.estimate, job.procs, job.killed, job.measured, bsld)


def write_jobs(jobs: Iterable[SimJob], path: str | Path, *,
               threshold: float = BSLD_THRESHOLD) -> int:
    """Write one row per finished job: CSV for ``.csv``, JSON lines for ``.jsonl``/``.json``.

    Returns the number of rows written.
    """
    target = Path(path)
    suffix = target.suffix.lower()
    if suffix not in (".csv", ".jsonl", ".json", ".ndjson"):
        raise MetricsError(f"{target}: per-job output must end in .csv or .jsonl")
    rows = 0
    try:
        with open(target, "w", newline="") as out:
            if suffix == ".csv":
                writer = csv.writer(out)
                writer.writerow(JOB_COLUMNS)
                for job in jobs:
                    writer.writerow(_job_row(job, threshold))
                    rows += 1
            else:
                for job in jobs:
                    out.write(json.dumps(dict(zip(JOB_COLUMNS, _job_row(job, threshold), strict=True))))
                    out.write("\n")
                    rows += 1
    except OSError as exc:
        raise MetricsError(f"{target}: cannot write per-job results: {exc.strerror or exc}") from None
    return rows
