"""The DESIGN.md invariants a fault case checks, as small functions over real state.

They are checked *before* the case cleans up (cleanup cancels what is left, which
would hide a job the grid lost):

* no lost job: every submitted job has its SQL record and is terminal (or legitimately
  still queued);
* no orphan process: no live process carries the case's marker environment variable;
* no leaked reservation: a grid reservation bound to a job of the case is gone within a
  few iterations of its job's end (the iteration prunes it), and so is every reservation
  the case made for its jobs;
* no overcommit: sampled during the whole case (fault, recovery and checks), the ranks
  running on a node never exceed its processors, and no rank runs twice at once;
* exactly once (:mod:`grid_tasks.faults.marks`): the ranks' own marks.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import psutil
from sqlalchemy import select

from grid_tasks.db import Job, Reservation, ReservationKind, session_scope
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


@dataclass(frozen=True)
class Marked:
    """A live process of a fault job: its node, job part, and parent."""

    pid: int
    ppid: int
    node: str
    part: tuple[str, str]  # (job id, rank) from the job manager's variables


def marked(marker: str) -> list[Marked]:
    """Every live, non-zombie process whose environment has the marker."""
    found = []
    for proc in psutil.process_iter(["pid", "ppid", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            env = proc.environ()
        except (psutil.Error, OSError):
            continue
        if env.get(MARKER_ENV) == marker:
            found.append(Marked(proc.pid, proc.info["ppid"] or 0,
                                env.get("GRID_TASKS_NODE", "?"),
                                (env.get("GRID_TASKS_JOB_ID", "?"),
                                 env.get("GRID_TASKS_RANK", "?"))))
    return found


def marked_processes(marker: str) -> list[tuple[int, str]]:
    """(pid, node) of every live, non-zombie process whose environment has the marker."""
    return [(m.pid, m.node) for m in marked(marker)]


def rank_copies(procs: Iterable[Marked]) -> list[Marked]:
    """The processes that are a rank's copy, not a child of one (a rank's shell runs
    ``sleep``: one rank, two processes): a marked process whose parent is a marked
    process of the same part is left out."""
    procs = list(procs)
    by_pid = {m.pid: m for m in procs}
    return [m for m in procs
            if not (m.ppid in by_pid and by_pid[m.ppid].part == m.part)]


def no_orphans(marker: str) -> Check:
    left = marked_processes(marker)
    return Check("no orphan process", not left,
                 f"{len(left)} left: {left[:5]}" if left else "none carries the marker")


def _unsettled(grid: Any, job_ids: list[int], allow_queued: bool) -> list[str]:
    bad = []
    for job_id in job_ids:
        try:
            status = gram_status(grid.sessions, job_id)  # the operator's view: SQL
        except NotFoundError:
            bad.append(f"{job_id}: no SQL record")
            continue
        if not status.terminal and not (allow_queued and status.maui_state.value == "Idle"):
            bad.append(f"{job_id}: {status.state.value}/{status.maui_state.value}")
    return bad


def no_lost_jobs(grid: Any, job_ids: list[int], *, allow_queued: bool = False,
                 wait: float = 0.0) -> Check:
    """Every job's SQL record exists and is terminal (or Idle when ``allow_queued``)
    within ``wait`` s - checked before any cleanup cancels what is left."""
    deadline = time.monotonic() + wait
    while True:
        bad = _unsettled(grid, job_ids, allow_queued)
        if not bad or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    return Check("no lost job", not bad,
                 (f"not ended within {wait:g} s: " if wait else "") + "; ".join(bad[:5])
                 if bad else f"{len(job_ids)} jobs accounted for")


def _leaked(sessions: Any, job_ids: list[int], names: Iterable[tuple[str, str]]) -> list[str]:
    """Reservations still held for a finished job: grid ones bound to a terminal job of
    the case, and the case's own ``names`` ((rm, name)) once all of its jobs ended."""
    with session_scope(sessions) as session:
        states = dict(session.execute(select(Job.id, Job.state).where(Job.id.in_(job_ids))).all())
        finished = {j for j, st in states.items() if getattr(st, "terminal", False)}
        rows = list(session.scalars(select(Reservation)))
        leaked = {f"{r.rm}/{r.name} (job {r.owner_job_id})" for r in rows
                  if r.owner_job_id in finished and r.kind is ReservationKind.GRID}
        if finished and len(finished) == len(job_ids):
            wanted = set(names)
            leaked |= {f"{r.rm}/{r.name} (made for the case)" for r in rows
                       if (r.rm, r.name) in wanted}
    return sorted(leaked)


def no_leaked_reservations(sessions: Any, job_ids: list[int],
                           names: Iterable[tuple[str, str]] = (), *,
                           grace: float = 10.0) -> Check:
    """No grid reservation stays bound to a finished job of the case, nor does any of
    the reservations (``names``: (rm, name)) made for its jobs once they all ended, after
    ``grace`` s (an RM's iteration prunes them; it runs every RMPOLLINTERVAL)."""
    names = list(names)
    deadline = time.monotonic() + grace
    while True:
        leaked = _leaked(sessions, job_ids, names)
        if not leaked or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    return Check("no leaked reservation", not leaked,
                 f"still held {grace:g} s after their jobs ended: {', '.join(leaked[:5])}"
                 if leaked else f"{len(names)} reservations held by the case's jobs, "
                                "none left behind")


class OvercommitSampler:
    """A thread counting the marked processes per node every ``period`` s."""

    def __init__(self, marker: str, procs: dict[str, int], period: float = 0.2) -> None:
        self.marker, self.procs, self.period = marker, procs, period
        self.samples = 0
        self.peaks: Counter[str] = Counter()
        self.violations: list[str] = []
        self.twice: list[str] = []
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
            self.sample(rank_copies(marked(self.marker)))

    def sample(self, copies: list[Marked]) -> None:
        """Count one sample: the rank copies per node, and parts running twice at once."""
        self.samples += 1
        per_node = Counter(m.node for m in copies)
        for node, n in per_node.items():
            self.peaks[node] = max(self.peaks[node], n)
            if n > self.procs.get(node, 0):
                self.violations.append(f"{node}: {n} > {self.procs.get(node, 0)}")
        for part, n in Counter(m.part for m in copies).items():
            if n > 1:
                where = sorted(m.node for m in copies if m.part == part)
                self.twice.append(f"job {part[0]} rank {part[1]}: {n} copies on "
                                  f"{', '.join(where)}")

    def check(self) -> Check:
        peaks = ", ".join(f"{n} peak {p}/{self.procs.get(n)}"
                          for n, p in sorted(self.peaks.items()))
        return Check("no overcommit", not self.violations,
                     "; ".join(self.violations[:3]) if self.violations
                     else f"{self.samples} samples; {peaks or 'no process seen'}")

    def copies_check(self) -> Check:
        """No part had two live copies in one sample (a duplicate execution seen live)."""
        seen = list(dict.fromkeys(self.twice))
        return Check("one copy at a time", not seen,
                     "; ".join(seen[:3]) if seen
                     else f"{self.samples} samples, never two copies of a rank")


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
