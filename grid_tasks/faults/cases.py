"""The fault cases on a live :class:`FaultGrid`: worker, job manager and Redis faults.

Each case starts from a healthy grid (:meth:`FaultGrid.ensure_healthy`: what an earlier
case froze resumed, what it killed restarted, every node heartbeating and recorded in
SQL), sets up work - jobs whose ranks leave marks (:mod:`grid_tasks.faults.marks`),
bound to grid reservations the case holds - injects one fault into a real process,
waits for the grid to recover (bounded), and checks the invariants *before* cleaning
up.  The overcommit sampler runs from before the first submission to the end of the
checks.  Recovery time is measured from the injection to the moment the grid is whole
again (the affected jobs terminal and a fresh probe job DONE on the faulted resource
manager), unless a case says otherwise.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from datetime import timezone
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select

import grid_tasks
from grid_tasks.broker.live import Broker
from grid_tasks.db import Job, Reservation, session_scope
from grid_tasks.embedded.stack import grid_tasks_command
from grid_tasks.errors import GridTasksError
from grid_tasks.faults.broker_child import REQUESTER
from grid_tasks.faults.harness import FaultGrid, FaultTimeout, until
from grid_tasks.faults.invariants import (Check, Outcome, OvercommitSampler, marked_processes,
                                          no_leaked_reservations, no_lost_jobs, no_orphans)
from grid_tasks.faults.marks import exactly_once, marked_rsl, no_run_after_end, write_script
from grid_tasks.faults.postgres import PostgresUnavailable, PrivatePostgres
from grid_tasks.gram.submission import gram_status
from grid_tasks.states import JobState, MauiJobState

SLEEP_LONG = "&(executable=/bin/sleep)(arguments={secs})(count={count})"
RECOVERY_BOUND = 60.0
#: How long after its job's end a rank on a node the case did not fault may still run
#: (lease TTL plus a visibility timeout, rounded up): a job declared over is fenced.
FENCE_GRACE = 8.0


class FaultCase:
    """One scenario: ``run(grid)`` returns its :class:`Outcome`.  Subclasses set the names
    and :meth:`exercise`; ``settle`` bounds the wait for every job to end before the
    checks (a job still not terminal then is reported lost)."""

    name = ""
    fault = ""
    settle = 30.0

    def run(self, fg: FaultGrid) -> Outcome:
        marker = f"{self.name}-{secrets.token_hex(4)}"
        self.dir = Path(fg.state_dir) / "cases" / marker
        write_script(self.dir, runtime_command())
        self.expect: dict[int, int] = {}  # marked job -> its count
        self.held: list[tuple[str, str]] = []  # (rm, name) reservations made for jobs
        self.faulted: set[str] = set()  # nodes whose daemon the case froze or killed
        self.at_most_once: set[int] = set()  # marked jobs not required to complete
        self.extra: list[Check] = []  # case-specific invariants, set by exercise()
        try:
            healed = fg.ensure_healthy()
        except GridTasksError as exc:
            return Outcome(self.name, self.fault, False, None, [],
                           f"the grid was not healthy before the case: {exc}")
        procs = {spec.name: spec.procs for spec in fg.topology.iter_nodes()}
        jobs: list[int] = []
        with OvercommitSampler(marker, procs) as sampler:
            try:
                recovery, detail = self.exercise(fg, marker, jobs)
                recovered = True
            except GridTasksError as exc:  # a timeout, or the grid refusing: not recovered
                recovery, detail, recovered = None, f"{type(exc).__name__}: {exc}", False
            checks = self.checks(fg, marker, jobs, sampler)
        self.cleanup(fg, jobs)
        _kill_left(marker)
        if healed:
            detail += f" (before the case: {', '.join(healed)})"
        return Outcome(self.name, self.fault, recovered, recovery, checks, detail)

    def exercise(self, fg: FaultGrid, marker: str, jobs: list[int]) -> tuple[float, str]:
        raise NotImplementedError

    def checks(self, fg: FaultGrid, marker: str, jobs: list[int],
               sampler: OvercommitSampler) -> list[Check]:
        """Every invariant, on the grid as the fault left it (nothing cancelled yet)."""
        lost = no_lost_jobs(fg.grid, jobs, wait=self.settle)
        final = _final(fg, list(self.expect))
        ends = {j: end for j, (_, end) in final.items() if end is not None}
        return [lost, self._orphans(marker),
                no_leaked_reservations(fg.grid.sessions, jobs, self.held),
                sampler.check(), sampler.copies_check(),
                exactly_once(self.dir, {j: ("FAILED" if j in self.at_most_once else final[j][0],
                                            n) for j, n in self.expect.items()}),
                no_run_after_end(self.dir, ends, FENCE_GRACE, skip_nodes=self.faulted),
                *self.extra]

    def submit(self, fg: FaultGrid, marker: str, jobs: list[int], rm: str, secs: int,
               count: int, *, reserve: bool = False, extra: str = "") -> Any:
        """A marked job of ``count`` ranks of ``secs`` s on ``rm``; with ``reserve``,
        bound to a grid reservation the case holds for it."""
        if reserve:
            extra += f"(reservation={self.reserve(fg, rm, count, secs)})"
        job = fg.submit(marked_rsl(self.dir, secs, count, extra), rm, marker)
        jobs.append(job.id)
        self.expect[job.id] = count
        return job

    def reserve(self, fg: FaultGrid, rm: str, count: int, secs: int) -> str:
        """A grid reservation on ``rm`` for ``count`` processors, as the broker makes
        for a co-reserved job (early start allowed); its name."""
        assert fg.settings is not None
        rsl = (f"&(executable=/bin/true)(resourceManagerContact={rm})(count={count})"
               f"(maxWallTime={max(1, (secs + 120) // 60)})")
        with Broker.for_settings(fg.settings, fg.grid.app, lead=1.0, timeout=20.0) as broker:
            co = broker.coreserve(broker.components(rsl, REQUESTER), now=time.time(),
                                  requester=REQUESTER, allow_early=True)
        (part,) = co.parts
        self.held.append((part.rm, part.name))
        return part.name

    def cleanup(self, fg: FaultGrid, jobs: list[int]) -> None:
        """Cancel what is still running, drop the case's reservations: the next case
        starts on an idle grid (after the checks: cleanup hides nothing)."""
        for job_id in jobs:
            try:
                if not fg.grid.status(job_id).terminal:
                    fg.grid.cancel(job_id)
                    fg.grid.job(job_id).wait(timeout=20)
            except Exception:  # noqa: BLE001 - the checks already reported what stayed
                pass
        try:
            with session_scope(fg.grid.sessions) as session:
                for rm, name in self.held:
                    session.execute(delete(Reservation).where(Reservation.rm == rm,
                                                              Reservation.name == name))
        except Exception:  # noqa: BLE001 - e.g. the case's own database is gone
            pass

    @staticmethod
    def _orphans(marker: str) -> Check:
        try:  # processes killed by PDEATHSIG take a moment to be reaped
            until(lambda: no_orphans(marker).ok, 5, "marked processes to exit")
        except FaultTimeout:
            pass
        return no_orphans(marker)


def _kill_left(marker: str) -> None:
    """SIGKILL what still carries the case's marker (reported as orphans already): the
    next case must not share the nodes with processes the scheduler does not know."""
    for pid, _ in marked_processes(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def runtime_command() -> list[str]:
    """``grid-tasks`` for a job's shell (jobs get no PYTHONPATH: name this tree)."""
    root = str(Path(grid_tasks.__file__).resolve().parent.parent)
    return ["env", f"PYTHONPATH={root}", *grid_tasks_command()]


def _final(fg: FaultGrid, job_ids: list[int]) -> dict[int, tuple[str, float | None]]:
    """Each job's state in SQL and its end (POSIX time) if it ended."""
    if not job_ids:
        return {}
    with session_scope(fg.grid.sessions) as session:
        rows = session.execute(select(Job.id, Job.state, Job.end_time)
                               .where(Job.id.in_(job_ids))).all()
    out = {j: ("MISSING", None) for j in job_ids}
    for job_id, state, end in rows:
        when = None if end is None or not state.terminal else \
            (end if end.tzinfo else end.replace(tzinfo=timezone.utc)).timestamp()
        out[job_id] = (state.value, when)
    return out


def _state(fg: FaultGrid, job_id: int) -> Any:
    """The job as the database has it (the operator's view: no gatekeeper needed while
    a fault is on)."""
    return gram_status(fg.grid.sessions, job_id)


def _brief(status: Any) -> str:
    why = f" {status.gram_error}: {status.reason}" if status.gram_error else ""
    return f"job {status.id} {status.state.value}{why}"


def probe(fg: FaultGrid, rm: str, marker: str, jobs: list[int], timeout: float) -> None:
    """A short job on ``rm`` must run to DONE: the grid serves again."""
    job = fg.submit("&(executable=/bin/sleep)(arguments=0.2)", rm, marker)
    jobs.append(job.id)
    status = job.wait(timeout=timeout)
    if status.state is not JobState.DONE:
        raise FaultTimeout(f"probe job {job.id} on {rm} ended {status.state.value}: "
                           f"{status.reason}")


class _NodeKill(FaultCase):
    """Kill the node daemon running a job, then restart it."""

    whole_group = True

    def exercise(self, fg: FaultGrid, marker: str, jobs: list[int]) -> tuple[float, str]:
        job = self.submit(fg, marker, jobs, "rmB", 60, 2, reserve=True)
        until(lambda: _state(fg, job.id).state is JobState.ACTIVE, 30, "the job ACTIVE")
        node = next(iter(_state(fg, job.id).nodes))
        self.faulted.add(node)
        # the orphan check below means something only if the processes were there
        until(lambda: marked_processes(marker), 10, "the job's processes")
        killed = time.monotonic()
        fg.kill_node(node, whole_group=self.whole_group)
        until(lambda: not marked_processes(marker), 10, "the job's processes to die")
        gone = time.monotonic() - killed
        status = job.wait(timeout=RECOVERY_BOUND)
        fg.start_node("rmB", node)
        probe(fg, "rmB", marker, jobs, RECOVERY_BOUND)
        return time.monotonic() - killed, (f"{node} killed; processes gone in {gone:.2f} s; "
                                           f"job {job.id} {status.state.value} "
                                           f"({status.gram_error})")


class NodeKillMidJob(_NodeKill):
    name = "worker-mid-job"
    fault = "SIGKILL the node daemon's process group while its job runs"


class JobManagerKill(_NodeKill):
    name = "job-manager"
    fault = ("SIGKILL the node daemon process only (job managers are its threads); "
             "job processes must die by PDEATHSIG")
    whole_group = False


class NodeKillMidLaunch(FaultCase):
    name = "worker-mid-launch"
    fault = "SIGKILL a frozen node daemon after the scheduler sent it a launch"

    def exercise(self, fg: FaultGrid, marker: str, jobs: list[int]) -> tuple[float, str]:
        # A first job warms the client, rmB's gatekeeper and nodes (parsers, connections):
        # the job below must be placed within node3's heartbeat TTL of the freeze.
        warm = self.submit(fg, marker, jobs, "rmB", 0, 4)
        warm.wait(timeout=RECOVERY_BOUND)
        name = self.reserve(fg, "rmB", 4, 30)  # before the freeze: node3 must stay up
        # Freeze node3 (recorded in SQL and heartbeating: ensure_healthy) so the launch
        # is in flight when the kill lands; its heartbeat TTL (3 s) keeps it schedulable
        # meanwhile.  count=4 spans node3 and node4.
        self.faulted.add("node3")
        os.killpg(fg.nodes["node3"].pid, signal.SIGSTOP)
        try:
            # 30 s ranks: a node4 part left running after its job failed shows
            job = fg.submit(marked_rsl(self.dir, 30, 4, f"(reservation={name})"), "rmB",
                            marker)
            jobs.append(job.id)
            self.expect[job.id] = 4
            until(lambda: _state(fg, job.id).maui_state in (MauiJobState.STARTING,
                                                            MauiJobState.RUNNING),
                  10, "the launch to be sent")
        finally:
            killed = time.monotonic()
            fg.kill_node("node3")
        launched_state = _state(fg, job.id).state.value
        fg.start_node("rmB", "node3")
        status = job.wait(timeout=RECOVERY_BOUND)
        probe(fg, "rmB", marker, jobs, RECOVERY_BOUND)
        return time.monotonic() - killed, (f"killed while {launched_state}; job {job.id} "
                                           f"ended {status.state.value} ({status.gram_error})")


class RedisRestart(FaultCase):
    name = "redis-restart"
    fault = "stop the grid's redis-server and start it again (same port and dir, empty)"

    def exercise(self, fg: FaultGrid, marker: str, jobs: list[int]) -> tuple[float, str]:
        # 8 procs on rmA: two run, two queue; the first holds a grid reservation
        handles = [self.submit(fg, marker, jobs, "rmA", 6, 4, reserve=i == 0)
                   for i in range(4)]
        until(lambda: any(_state(fg, h.id).state is JobState.ACTIVE for h in handles), 30,
              "a job ACTIVE")
        killed = time.monotonic()
        fg.redis.stop()
        time.sleep(0.5)
        fg.redis.start()
        revived: list[str] = []

        def settled() -> bool:
            revived.extend(fg.revive())
            return all(_state(fg, h.id).terminal for h in handles)

        until(settled, RECOVERY_BOUND, "every job terminal after the restart", poll=0.2)
        probe(fg, "rmA", marker, jobs, RECOVERY_BOUND)
        states = ", ".join(_brief(_state(fg, h.id)) for h in handles)
        # job managers ride out the outage and re-create their leases: running jobs live on
        done = all(_state(fg, h.id).state is JobState.DONE for h in handles)
        self.extra.append(Check("running jobs survive", done, f"expected all DONE: {states}"))
        return time.monotonic() - killed, (f"jobs after restart: {states}; restarted by the "
                                           f"process manager: {', '.join(revived) or 'none'}")




class PostgresRestart(FaultCase):
    name = "postgres-restart"
    fault = "restart a private PostgreSQL server (pg_ctl stop -m fast; start) while jobs run"

    def run(self, fg: FaultGrid) -> Outcome:
        """On its own grid whose database is a private PostgreSQL server."""
        base = Path(fg.state_dir) / f"pg-{secrets.token_hex(3)}"
        try:
            self.server = PrivatePostgres().start()
        except PostgresUnavailable as exc:
            return Outcome(self.name, self.fault, False, None, [], f"skipped: {exc}")
        try:
            with FaultGrid(base / "grid", database_url=self.server.url) as pg_grid:
                return super().run(pg_grid)
        finally:
            self.server.close()

    def exercise(self, fg: FaultGrid, marker: str, jobs: list[int]) -> tuple[float, str]:
        # Two jobs fill rmA, two queue behind them.  The restart lands while the first
        # two run; the queued ones launch after it (a launch *during* the outage strands
        # its job - see docs/RELIABILITY.md, known problems).
        handles = [self.submit(fg, marker, jobs, "rmA", 6, 4, reserve=i == 0)
                   for i in range(4)]
        until(lambda: sum(_state(fg, h.id).state is JobState.ACTIVE for h in handles) == 2,
              30, "two jobs ACTIVE")
        killed = time.monotonic()
        self.server.restart()
        revived: list[str] = []

        def settled() -> bool:
            revived.extend(fg.revive())
            try:
                return all(_state(fg, h.id).terminal for h in handles)
            except Exception:  # noqa: BLE001 - our own pool may hold a dead connection once
                return False

        until(settled, RECOVERY_BOUND, "every job terminal after the restart", poll=0.2)
        probe(fg, "rmA", marker, jobs, RECOVERY_BOUND)
        states = ", ".join(_brief(_state(fg, h.id)) for h in handles)
        return time.monotonic() - killed, (f"jobs after restart: {states}; restarted by the "
                                           f"process manager: {', '.join(revived) or 'none'}")
