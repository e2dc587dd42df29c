"""The DESIGN.md invariants a fault case checks, as small functions over real state.

* no lost job: every submitted job has its SQL record and is terminal (or legitimately
  still queued);
* no orphan process: no live process carries the case's marker environment variable;
* no leaked reservation or token: finished jobs hold no SQL reservation, and the token
  store has no live unconfirmed token once its TTL passed;
* no overcommit: sampled during the case, the processes running on a node never
  exceed its processors.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import psutil
from sqlalchemy import select

from grid_tasks.db import Reservation, session_scope
from grid_tasks.errors import NotFoundError
from grid_tasks.faults.harness import MARKER_ENV
from grid_tasks.gram.submission import gram_status


@dataclass
class Check:
    """One invariant's verdict."""

    name: str
    ok: bool
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


def marked_processes(marker: str) -> list[tuple[int, str]]:
    """(pid, node) of every live, non-zombie process whose environment has the marker."""
    found = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            env = proc.environ()
        except (psutil.Error, OSError):
            continue
        if env.get(MARKER_ENV) == marker:
            found.append((proc.pid, env.get("GRID_TASKS_NODE", "?")))
    return found


def no_orphans(marker: str) -> Check:
    left = marked_processes(marker)
    return Check("no orphan process", not left,
                 f"{len(left)} left: {left[:5]}" if left else "none carries the marker")


def no_lost_jobs(grid: Any, job_ids: list[int], *, allow_queued: bool = False) -> Check:
    """Every job's SQL record exists and is terminal (or Idle when ``allow_queued``)."""
    bad = []
    for job_id in job_ids:
        try:
            status = gram_status(grid.sessions, job_id)  # the operator's view: SQL
        except NotFoundError:
            bad.append(f"{job_id}: no SQL record")
            continue
        if not status.terminal and not (allow_queued and status.maui_state.value == "Idle"):
            bad.append(f"{job_id}: {status.state.value}/{status.maui_state.value}")
    return Check("no lost job", not bad,
                 "; ".join(bad[:5]) or f"{len(job_ids)} jobs accounted for")


def no_leaked_reservations(grid: Any, job_ids: list[int]) -> Check:
    """No SQL reservation is still bound to a finished job of the case."""
    finished = {j for j in job_ids if gram_status(grid.sessions, j).terminal}
    with session_scope(grid.sessions) as session:
        rows = list(session.scalars(select(Reservation)))
        leaked = [r.name for r in rows if r.owner_job_id in finished]
    return Check("no leaked reservation", not leaked,
                 f"leaked: {leaked}" if leaked else f"{len(rows)} reservations, none stale")


class OvercommitSampler:
    """A thread counting the marked processes per node every ``period`` s."""

    def __init__(self, marker: str, procs: dict[str, int], period: float = 0.2) -> None:
        self.marker, self.procs, self.period = marker, procs, period
        self.samples = 0
        self.peaks: Counter[str] = Counter()
        self.violations: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="overcommit")

    def __enter__(self) -> "OvercommitSampler":
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            per_node = Counter(node for _, node in marked_processes(self.marker))
            self.samples += 1
            for node, n in per_node.items():
                self.peaks[node] = max(self.peaks[node], n)
                if n > self.procs.get(node, 0):
                    self.violations.append(f"{node}: {n} > {self.procs.get(node, 0)}")

    def check(self) -> Check:
        peaks = ", ".join(f"{n} peak {p}/{self.procs.get(n)}"
                          for n, p in sorted(self.peaks.items()))
        return Check("no overcommit", not self.violations,
                     "; ".join(self.violations[:3]) if self.violations
                     else f"{self.samples} samples; {peaks or 'no process seen'}")


@dataclass
class Outcome:
    """What a case produced: recovered or not, how fast, its invariant checks."""

    case: str
    fault: str
    recovered: bool
    recovery_s: float | None
    checks: list[Check] = field(default_factory=list)
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.recovered and all(c.ok for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {"case": self.case, "fault": self.fault, "recovered": self.recovered,
                "recovery_s": self.recovery_s, "ok": self.ok, "detail": self.detail,
                "checks": [c.to_dict() for c in self.checks]}
