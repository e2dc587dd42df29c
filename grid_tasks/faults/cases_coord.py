"""Fault cases for coordination and load (issue 21, findings 4, 5 and 6):

* ``redis-lost-barrier``: Redis killed and restarted empty while a strict coallocated
  job has subjob ``a`` in its start barrier and ``b`` still queued behind a job that
  fills rmB.  The job must fail within its barrier timeout + 5 s of the loss, with a
  reason naming the lost coordination state, and ``b`` must never be launched.
* ``scheduler-holding-lock``: the scheduler worker SIGKILLed at a moment it holds rmA's
  iteration lock, a standby scheduler worker beside it.  The lock's value is a random
  token, not a PID, so the holder is made known: the standby is frozen while the case
  waits for the lock to be taken (then only the scheduler can hold it), and resumed
  right after the kill; the kill counts only if the same token is still there after
  the holder died.  The lock must lapse, and rmA serve again through the standby,
  within 10 s (target: a dead holder stalls its RM for less than 10 s).
* ``daemon-kill-load``: node3's daemon SIGKILLed (process group) under a 100-job load
  on rmB and restarted at once, as a process manager would; every job the kill hit must
  end or start again within 60 s.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from sqlalchemy import select

from grid_tasks.db import CoallocatedJob, Job, session_scope
from grid_tasks.effects import lock_key
from grid_tasks.faults.cases import RECOVERY_BOUND, FaultCase, _brief, _state, probe
from grid_tasks.faults.harness import FaultGrid, FaultTimeout, until
from grid_tasks.faults.invariants import Check
from grid_tasks.faults.marks import read_marks
from grid_tasks.states import JobState, MauiJobState
from grid_tasks.utc import as_utc

BARRIER_TIMEOUT_S = 20.0
LOCK_TARGET_S = 10.0
LOAD_JOBS = 100
LOAD_TARGET_S = 60.0


def _sql(fg: FaultGrid, fn: Any) -> Any:
    with session_scope(fg.grid.sessions) as session:
        return fn(session)


class RedisLostBeforeRelease(FaultCase):
    name = "redis-lost-barrier"
    fault = ("SIGKILL redis-server and start it empty while a strict coallocated job has "
             "subjob a in its start barrier and b queued (rmB full)")
    settle = 60.0

    def exercise(self, fg: FaultGrid, marker: str, jobs: list[int]) -> tuple[float, str]:
        blocker = self.submit(fg, marker, jobs, "rmB", 45, 4, reserve=True)
        until(lambda: _state(fg, blocker.id).state is JobState.ACTIVE, 30, "rmB full")
        co = fg.grid.job_request(self._rsl(), barrier_timeout=BARRIER_TIMEOUT_S,
                                 coreserve=False)
        # before the fault only: subjob_states() may settle the job itself (finding 8)
        until(lambda: (co.status().subjob("a").entered or 0) >= 2, 40, "a in the barrier")
        gram = self._gram_jobs(fg, co.id)
        jobs.extend(gram.values())
        self.expect.update({j: 2 for j in gram.values()})
        # a rank whose barrier failed exits before its first mark: a subjob of a failed
        # coallocated job may end DONE (exit code 3) having run nothing past the barrier
        self.at_most_once.update(gram.values())
        killed = time.monotonic()
        os.kill(fg.redis.pid, signal.SIGKILL)
        fg.redis.stop()
        fg.redis.start()
        fg.revive()
        state = until(lambda: self._settled(fg, co.id), BARRIER_TIMEOUT_S + 30,
                      "the coallocated job to settle in SQL", poll=0.2)
        settled = time.monotonic() - killed
        # SQL, not the gatekeeper: its worker may still be reconnecting to the new Redis
        until(lambda: _state(fg, blocker.id).terminal, RECOVERY_BOUND, "rmB's blocker to end",
              poll=0.5)
        time.sleep(5.0)  # rmB is free now: b would be launched here if it were left
        b = _state(fg, gram["b"]) if "b" in gram else None
        passed = [e for e in read_marks(self.dir) if e.job in gram.values()]
        self.extra += [
            Check("settled within barrier timeout + 5 s", settled < BARRIER_TIMEOUT_S + 5,
                  f"{state[0]} {settled:.1f} s after the loss: {state[1]}"),
            Check("reason names the lost coordination state",
                  "lost" in (state[1] or "").lower(), f"reason: {state[1]}"),
            Check("b never launched", b is None or (b.terminal and not _started(fg, b.id)),
                  f"b: {_brief(b) if b else 'no GRAM job'}"),
            Check("no user code past the barrier", not passed,
                  f"{len(passed)} ranks passed the barrier" if passed else "none passed")]
        probe(fg, "rmB", marker, jobs, RECOVERY_BOUND)
        return settled, f"coallocated job {co.id} {state[0]} after {settled:.1f} s: {state[1]}"

    def _rsl(self) -> str:
        part = ('(&(resourceManagerContact={rm})(label={label})(count=2)(maxWallTime=2)'
                f'(executable="{self.dir / "mark.sh"}")(arguments="{self.dir}" "5" "barrier"))')
        return "+" + part.format(rm="rmA", label="a") + part.format(rm="rmB", label="b")

    @staticmethod
    def _gram_jobs(fg: FaultGrid, co_id: int) -> dict[str, int]:
        rows = _sql(fg, lambda s: s.execute(select(Job.coallocation_label, Job.id).where(
            Job.coallocation_id == co_id)).all())
        return {str(label): int(job) for label, job in rows}

    @staticmethod
    def _settled(fg: FaultGrid, co_id: int) -> tuple[str, str] | None:
        """(state, reason) of the coallocated job once terminal in SQL (read only: no
        call that could settle it for the grid)."""
        try:
            row = _sql(fg, lambda s: s.execute(select(
                CoallocatedJob.state, CoallocatedJob.failure_reason).where(
                CoallocatedJob.id == co_id)).first())
        except Exception:  # noqa: BLE001 - our read during the restart
            return None
        if row is None or not row[0].terminal:
            return None
        return row[0].value, row[1] or ""


def _idle(fg: FaultGrid, job_ids: list[int]) -> list[int]:
    """The jobs of ``job_ids`` still queued (Idle) now."""
    return list(_sql(fg, lambda s: s.scalars(select(Job.id).where(
        Job.id.in_(job_ids), Job.maui_state == MauiJobState.IDLE)).all()))


def _first_start(fg: FaultGrid, job_ids: list[int], after: float) -> float | None:
    """POSIX time of the first start among ``job_ids`` after ``after``, if any yet."""
    starts = _sql(fg, lambda s: s.scalars(select(Job.start_time).where(
        Job.id.in_(job_ids), Job.start_time.is_not(None))).all())
    later = [t for t in (as_utc(x).timestamp() for x in starts) if t > after]
    return min(later) if later else None


def _started(fg: FaultGrid, job_id: int) -> bool:
    return _sql(fg, lambda s: s.get(Job, job_id).start_time) is not None


class SchedulerKillHoldingLock(FaultCase):
    name = "scheduler-holding-lock"
    fault = ("SIGKILL the scheduler worker (process group) while it holds rmA's iteration "
             "lock; a standby scheduler worker serves on")
    attempts = 15

    def exercise(self, fg: FaultGrid, marker: str, jobs: list[int]) -> tuple[float, str]:
        client = fg.grid.redis
        standby = fg.start_scheduler(standby=True)
        try:
            time.sleep(8.0)  # the standby worker up (imports, broker connection)
            for i in range(10):  # a queue keeps rmA's iterations busy
                self.submit(fg, marker, jobs, "rmA", 4, 4, reserve=i == 0)
            token, killed, attempt = self._kill_holder(fg, standby, client)
            ttl = client.pttl(lock_key("rmA"))
            wall = time.time() - (time.monotonic() - killed)
            idle = _idle(fg, jobs)  # only a new iteration can start these
            lapsed = until(lambda: client.get(lock_key("rmA")) != token, RECOVERY_BOUND + 30,
                           "the dead holder's lock to lapse", poll=0.05) and \
                time.monotonic() - killed
            # rmA's queue starts its next job through the standby: the stall measured is
            # the lock's, not a restart's
            started = until(lambda: _first_start(fg, idle, wall), RECOVERY_BOUND + 30,
                            "a job of rmA's queue to start after the kill", poll=0.1)
            stall = started - wall
        finally:
            os.kill(standby.pid, signal.SIGCONT)
            fg.revive()
            fg.supervisor.stop(standby)
        self.extra += [
            Check("dead holder's lock lapses within 10 s", lapsed < LOCK_TARGET_S,
                  f"{lapsed:.1f} s (TTL left at the kill: {ttl / 1000:.1f} s)"),
            Check("RM serves again within 10 s", stall < LOCK_TARGET_S,
                  f"the first of {len(idle)} jobs queued at the kill started "
                  f"{stall:.1f} s after it")]
        probe(fg, "rmA", marker, jobs, RECOVERY_BOUND)
        return stall, (f"killed holding the lock (attempt {attempt}; {ttl / 1000:.1f} s of "
                       f"TTL left); lock lapsed after {lapsed:.1f} s; rmA served again "
                       f"after {stall:.1f} s")

    def _kill_holder(self, fg: FaultGrid, standby: Any, client: Any) -> tuple[bytes, float, int]:
        """SIGKILL the scheduler at a moment it holds rmA's lock: the standby is frozen
        meanwhile, so the holder can only be the scheduler; resumed right after the
        kill.  (token, kill time, attempt)."""
        for attempt in range(1, self.attempts + 1):
            os.kill(standby.pid, signal.SIGSTOP)
            try:  # a lock the standby held when frozen must go first (its TTL)
                until(lambda: not client.get(lock_key("rmA")), RECOVERY_BOUND + 30,
                      "rmA's lock free", poll=0.01)
                token = until(lambda: client.get(lock_key("rmA")), 30, "rmA's lock taken",
                              poll=0.002)
                assert fg.scheduler is not None
                os.killpg(fg.scheduler.pid, signal.SIGKILL)
                killed = time.monotonic()
            finally:
                os.kill(standby.pid, signal.SIGCONT)
            fg.scheduler.process.wait(10)
            if client.get(lock_key("rmA")) == token:
                return token, killed, attempt
            fg.revive()
            time.sleep(5.0)  # the restarted scheduler up again
        raise FaultTimeout(f"the scheduler never died holding the lock in "
                           f"{self.attempts} attempts")


class NodeKillUnderLoad(FaultCase):
    name = "daemon-kill-load"
    fault = (f"SIGKILL node3's daemon (process group) under a {LOAD_JOBS}-job load on rmB; "
             "restarted at once")
    settle = 240.0

    def exercise(self, fg: FaultGrid, marker: str, jobs: list[int]) -> tuple[float, str]:
        handles = [self.submit(fg, marker, jobs, "rmB", 2, 1, reserve=i == 0)
                   for i in range(LOAD_JOBS)]
        until(lambda: self._running_on(fg, handles, "node3") and self._done(fg, handles) >= 8,
              120, "node3 running load jobs")
        hit = self._running_on(fg, handles, "node3")
        self.faulted.add("node3")
        killed = time.time()
        fg.kill_node("node3")
        fg.start_node("rmB", "node3", wait=False)
        recovered = self._recovered(fg, hit, killed)
        worst = time.time() - killed if recovered is None else recovered
        self.extra.append(Check("the killed daemon's jobs end or start again within 60 s",
                                recovered is not None and recovered < LOAD_TARGET_S,
                                f"{len(hit)} jobs hit; the last one after "
                                f"{worst:.1f} s" + ("" if recovered is not None
                                                    else " (still waiting)")))
        until(lambda: self._done(fg, handles) == LOAD_JOBS, self.settle,
              "every load job to end", poll=0.5)
        return worst, (f"{len(hit)} jobs hit on node3: {', '.join(map(str, hit[:6]))}; "
                       f"the last ended or restarted {worst:.1f} s after the kill")

    @staticmethod
    def _running_on(fg: FaultGrid, handles: list[Any], node: str) -> list[int]:
        ids = [h.id for h in handles]
        rows = _sql(fg, lambda s: s.execute(select(Job.id, Job.nodes_allocated).where(
            Job.id.in_(ids), Job.maui_state.in_([MauiJobState.STARTING,
                                                 MauiJobState.RUNNING]))).all())
        return [j for j, nodes in rows if node in (nodes or {})]

    @staticmethod
    def _done(fg: FaultGrid, handles: list[Any]) -> int:
        ids = [h.id for h in handles]
        states = _sql(fg, lambda s: s.scalars(select(Job.state).where(Job.id.in_(ids))).all())
        return sum(1 for st in states if st.terminal)

    @staticmethod
    def _recovered(fg: FaultGrid, hit: list[int], killed: float) -> float | None:
        """Seconds until every job in ``hit`` ended or started again after the kill."""
        left = set(hit)
        deadline = time.monotonic() + RECOVERY_BOUND + 30
        last = 0.0
        while left and time.monotonic() < deadline:
            rows = _sql(fg, lambda s: s.execute(select(Job.id, Job.state, Job.start_time)
                                                .where(Job.id.in_(list(left)))).all())
            for job_id, state, start in rows:
                again = start is not None and as_utc(start).timestamp() > killed
                if state.terminal or (state is JobState.ACTIVE and again):
                    left.discard(job_id)
                    last = time.time() - killed
            time.sleep(0.2)
        return None if left else last
