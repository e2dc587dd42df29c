"""Fault cases for fencing: a node daemon frozen (SIGSTOP of its PID only, its job
processes keep running) for longer than the visibility timeout, before and after the
launch it received was confirmed (issue 21, findings 1 and 2).

What must hold: a part the grid declared lost is fenced before its processors are
reused or it is launched again - no node overcommitted, never two copies of a rank at
once, a DONE job's ranks each run to their end exactly once, and nothing keeps running
on a healthy node after its job was declared over.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from grid_tasks.faults.cases import RECOVERY_BOUND, FaultCase, _brief, _state, probe
from grid_tasks.faults.harness import FaultGrid, until
from grid_tasks.faults.invariants import Check
from grid_tasks.faults.marks import read_marks
from grid_tasks.states import JobState, MauiJobState

#: How long the daemon stays frozen: more than the visibility timeout (5 s), the
#: heartbeat TTL (3 s) and the launch timeout (5 s) of the fault grid.
FREEZE_S = 12.0
#: Rank duration of the frozen job: it outlives the freeze by far, so a part left
#: running after its job was failed shows in the marks and in the sampler.
JOB_S = 30
VICTIM = "node3"


def _wait_terminal(fg: FaultGrid, job_ids: list[int], bound: float) -> None:
    until(lambda: all(_state(fg, j).terminal for j in job_ids), bound,
          "the jobs to end after the daemon was resumed", poll=0.2)


def _ranks_on(directory: Path, job: int, node: str) -> int:
    return sum(1 for e in read_marks(directory) if e.job == job and e.node == node)


class FrozenAfterConfirm(FaultCase):
    """Finding 1: the job is RUNNING on node3 and node4; node3's daemon freezes.  The
    job is failed as "node3 lost"; its node4 ranks must be fenced before a queued job
    is placed on node4 beside them."""

    name = "daemon-frozen-running"
    fault = (f"SIGSTOP node3's daemon (its PID only) for {FREEZE_S:g} s, longer than the "
             "visibility timeout, while its 4-rank job runs on node3 and node4 (launch "
             "confirmed); a 2-rank job waits for rmB")
    settle = 90.0

    def exercise(self, fg: FaultGrid, marker: str, jobs: list[int]) -> tuple[float, str]:
        job = self.submit(fg, marker, jobs, "rmB", JOB_S, 4, reserve=True)
        until(lambda: _state(fg, job.id).maui_state is MauiJobState.RUNNING, 30,
              "the launch confirmed (RUNNING)")
        until(lambda: _ranks_on(self.dir, job.id, VICTIM) == 2, 10, "node3's ranks")
        self.faulted.add(VICTIM)
        frozen = time.monotonic()
        fg.freeze(VICTIM)
        waiting = self.submit(fg, marker, jobs, "rmB", 10, 2)
        time.sleep(max(0.0, FREEZE_S - (time.monotonic() - frozen)))
        at_thaw = _brief(_state(fg, job.id))
        fg.thaw()
        _wait_terminal(fg, [job.id, waiting.id], RECOVERY_BOUND + JOB_S)
        probe(fg, "rmB", marker, jobs, RECOVERY_BOUND)  # count=1: must be placed again
        recovery = time.monotonic() - frozen
        self.extra.append(_node_serves(fg, marker, jobs))
        return recovery, (f"node3 frozen {FREEZE_S:g} s; at the thaw {at_thaw}; then "
                          f"{_brief(_state(fg, job.id))}; waiting job "
                          f"{_brief(_state(fg, waiting.id))}")


class FrozenBeforeConfirm(FaultCase):
    """Finding 2: node3's daemon freezes right after it spawned its ranks, before it
    reported the start (the rank itself stops the daemon: see
    :mod:`grid_tasks.faults.marks`).  The launch is never confirmed, so it is rolled
    back; the job must not run again while the frozen copy still runs."""

    name = "daemon-frozen-launch"
    fault = (f"SIGSTOP node3's daemon (its PID only) right after it spawned a 4-rank "
             f"job's node3 ranks, before the launch was confirmed; resumed after "
             f"{FREEZE_S:g} s")
    settle = 90.0

    def exercise(self, fg: FaultGrid, marker: str, jobs: list[int]) -> tuple[float, str]:
        name = self.reserve(fg, "rmB", 4, JOB_S)
        pid = fg.nodes[VICTIM].pid
        flag = self.dir / f"freeze.{VICTIM}"
        flag.write_text(str(pid))
        fg.frozen[pid] = VICTIM  # resumed by thaw() / the next case whatever happens
        self.faulted.add(VICTIM)
        job = self.submit(fg, marker, jobs, "rmB", JOB_S, 4, extra=f"(reservation={name})")
        until(lambda: Path(f"{flag}.done").exists(), 30, "a node3 rank to freeze its daemon")
        frozen = time.monotonic()
        at_freeze = _state(fg, job.id).maui_state.value
        time.sleep(FREEZE_S)
        at_thaw = _brief(_state(fg, job.id))
        fg.thaw()
        _wait_terminal(fg, [job.id], RECOVERY_BOUND + 2 * JOB_S)
        probe(fg, "rmB", marker, jobs, RECOVERY_BOUND)
        recovery = time.monotonic() - frozen
        self.extra.append(_node_serves(fg, marker, jobs))
        return recovery, (f"node3 frozen after spawning (job {at_freeze} at the freeze); "
                          f"at the thaw {at_thaw}; then {_brief(_state(fg, job.id))}")


def _node_serves(fg: FaultGrid, marker: str, jobs: list[int]) -> Check:
    """A 4-rank probe needs node3 and node4: the resumed daemon serves again."""
    job = fg.submit("&(executable=/bin/true)(count=4)", "rmB", marker)
    jobs.append(job.id)
    status: Any = job.wait(timeout=RECOVERY_BOUND)
    return Check("resumed node serves again", status.state is JobState.DONE,
                 f"4-rank probe on rmB: {_brief(status)}")
