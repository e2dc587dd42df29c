"""The invariant checks themselves catch what they are meant to catch (real processes,
a real database): each fails on the fault it exists for."""

from __future__ import annotations

import os
import subprocess
import time
from datetime import datetime, timedelta, timezone

import psutil
import pytest
from sqlalchemy import delete

from grid_tasks.db import (Job, Reservation, ReservationKind, ResourceManager, get_engine,
                           session_factory, session_scope)
from grid_tasks.db.engine import dispose_engines
from grid_tasks.db.migrations import migrate
from grid_tasks.faults import MARKER_ENV, FaultGrid, until
from grid_tasks.faults.invariants import (Marked, OvercommitSampler, marked_processes,
                                          no_leaked_reservations, no_lost_jobs, no_orphans,
                                          rank_copies)
from grid_tasks.faults.marks import exactly_once, no_run_after_end, write_script
from grid_tasks.states import JobState


@pytest.fixture
def marked(request: pytest.FixtureRequest):
    procs = []

    def spawn(marker: str, node: str) -> subprocess.Popen:
        env = {**os.environ, MARKER_ENV: marker, "GRID_TASKS_NODE": node}
        proc = subprocess.Popen(["sleep", "30"], env=env)
        procs.append(proc)
        return proc

    yield spawn
    for proc in procs:
        proc.kill()
        proc.wait()


def test_orphan_scan_finds_marked_processes_only(marked) -> None:
    proc = marked("orphan-test-a", "node3")
    assert not no_orphans("orphan-test-a").ok
    assert (proc.pid, "node3") in marked_processes("orphan-test-a")
    assert no_orphans("orphan-test-b").ok
    proc.kill()
    proc.wait()
    assert no_orphans("orphan-test-a").ok


def test_overcommit_sampler_flags_more_processes_than_procs(marked) -> None:
    with OvercommitSampler("oc-test", {"node3": 2}, period=0.05) as sampler:
        for _ in range(3):
            marked("oc-test", "node3")
        deadline = time.monotonic() + 5
        while not sampler.violations and time.monotonic() < deadline:
            time.sleep(0.05)
    check = sampler.check()
    assert not check.ok and "node3: 3 > 2" in check.detail


def test_lost_job_check_flags_a_missing_record(fault_grid: FaultGrid) -> None:
    check = no_lost_jobs(fault_grid.grid, [987654])
    assert not check.ok and "987654: no SQL record" in check.detail


# -- exactly once: marks left by real rank processes ------------------------------------

def _run_rank(case_dir, job: int, rank: int, secs: int, node: str = "node3",
              wait: bool = True) -> subprocess.Popen:
    env = {**os.environ, "GRID_TASKS_JOB_ID": str(job), "GRID_TASKS_RANK": str(rank),
           "GRID_TASKS_NODE": node}
    proc = subprocess.Popen(["sh", str(case_dir / "mark.sh"), str(case_dir), str(secs)],
                            env=env)
    if wait:
        assert proc.wait(10) == 0
    return proc


def test_exactly_once_passes_one_execution_per_rank(tmp_path) -> None:
    write_script(tmp_path)
    for rank in range(2):
        _run_rank(tmp_path, 7, rank, 0)
    check = exactly_once(tmp_path, {7: ("DONE", 2)})
    assert check.ok, check.detail
    assert "2 executions of 2 parts, 2 to their end" in check.detail


def test_exactly_once_fails_on_a_duplicate_execution(tmp_path) -> None:
    write_script(tmp_path)
    _run_rank(tmp_path, 7, 0, 0)
    _run_rank(tmp_path, 7, 0, 0, node="node4")  # the same part ran again elsewhere
    check = exactly_once(tmp_path, {7: ("DONE", 1)})
    assert not check.ok and "job 7 rank 0: ran to its end 2 times" in check.detail


def test_exactly_once_fails_on_two_copies_at_once(tmp_path) -> None:
    write_script(tmp_path)
    first = _run_rank(tmp_path, 8, 0, 2, wait=False)
    second = _run_rank(tmp_path, 8, 0, 2, node="node4", wait=False)
    time.sleep(1.5)
    first.kill()  # fenced copy: no end line, but it overlapped the other one
    first.wait()
    assert second.wait(10) == 0
    check = exactly_once(tmp_path, {8: ("FAILED", 1)})
    assert not check.ok and "two copies at once" in check.detail, check.detail


def test_exactly_once_fails_on_a_missing_execution(tmp_path) -> None:
    write_script(tmp_path)
    _run_rank(tmp_path, 9, 0, 0)  # rank 1 of this DONE job never ran
    check = exactly_once(tmp_path, {9: ("DONE", 2)})
    assert not check.ok and "job 9 rank 1: DONE, but no copy ran to its end" in check.detail
    # a FAILED job may have parts that never started
    assert exactly_once(tmp_path, {9: ("FAILED", 2)}).ok


def test_exactly_once_fails_on_marks_of_an_unknown_job(tmp_path) -> None:
    write_script(tmp_path)
    _run_rank(tmp_path, 11, 0, 0)
    check = exactly_once(tmp_path, {})
    assert not check.ok and "job 11: marks of a job the case did not submit" in check.detail


def test_run_after_end_flags_a_rank_alive_after_its_job_ended(tmp_path) -> None:
    write_script(tmp_path)
    ended = time.time()
    _run_rank(tmp_path, 12, 0, 2)  # alive 2 s after "the job ended"
    check = no_run_after_end(tmp_path, {12: ended}, grace=1.0)
    assert not check.ok and "job 12 rank 0 on node3" in check.detail
    assert no_run_after_end(tmp_path, {12: ended}, grace=1.0, skip_nodes={"node3"}).ok
    assert no_run_after_end(tmp_path, {12: ended + 5}, grace=1.0).ok


def test_freeze_file_stops_the_named_process_once(tmp_path) -> None:
    write_script(tmp_path)
    victim = subprocess.Popen(["sleep", "30"])
    try:
        (tmp_path / "freeze.node3").write_text(str(victim.pid))
        _run_rank(tmp_path, 13, 0, 0)
        until(lambda: psutil.Process(victim.pid).status() == psutil.STATUS_STOPPED, 5,
              "the victim stopped")
        assert (tmp_path / "freeze.node3.done").exists()
    finally:
        victim.kill()
        victim.wait()


# -- the sampler: copies of one rank, not its child processes -----------------------------

def _m(pid: int, ppid: int, node: str, job: str, rank: str) -> Marked:
    return Marked(pid, ppid, node, (job, rank))


def test_sampler_counts_a_rank_with_its_child_once() -> None:
    sampler = OvercommitSampler("x", {"node3": 2})
    shell, child, other = _m(10, 1, "node3", "5", "0"), _m(11, 10, "node3", "5", "0"), \
        _m(12, 1, "node3", "5", "1")
    sampler.sample(rank_copies([shell, child, other]))
    assert sampler.check().ok and sampler.copies_check().ok
    assert sampler.peaks["node3"] == 2


def test_sampler_flags_two_copies_of_a_rank_and_an_overcommit() -> None:
    sampler = OvercommitSampler("x", {"node3": 2, "node4": 2})
    sampler.sample(rank_copies([_m(10, 1, "node3", "5", "0"), _m(20, 2, "node4", "5", "0"),
                                _m(21, 2, "node4", "6", "0"), _m(22, 2, "node4", "6", "1")]))
    assert not sampler.copies_check().ok
    assert "job 5 rank 0: 2 copies on node3, node4" in sampler.copies_check().detail
    assert not sampler.check().ok and "node4: 3 > 2" in sampler.check().detail


# -- leaked reservations: a reservation bound to a finished job ---------------------------

@pytest.fixture
def sessions(tmp_path):
    url = f"sqlite:///{tmp_path / 'res.db'}"
    migrate(url)
    yield session_factory(get_engine(url))
    dispose_engines(url)


def _job_with_reservation(sessions, state: JobState, name: str) -> int:
    now = datetime.now(timezone.utc)
    with session_scope(sessions) as session:
        if session.get(ResourceManager, "rmB") is None:
            session.add(ResourceManager(name="rmB"))
            session.flush()
        job = Job(rm="rmB", state=state)
        session.add(job)
        session.flush()
        session.add(Reservation(name=name, rm="rmB", kind=ReservationKind.GRID,
                                owner_job_id=job.id, start_time=now,
                                end_time=now + timedelta(hours=1)))
        return job.id


def test_leaked_reservation_check_fails_on_one_bound_to_a_finished_job(sessions) -> None:
    done = _job_with_reservation(sessions, JobState.FAILED, "held.0")
    check = no_leaked_reservations(sessions, [done], [("rmB", "held.0")], grace=0.3)
    assert not check.ok and "rmB/held.0" in check.detail


def test_leaked_reservation_check_passes_while_the_job_runs_or_once_dropped(sessions) -> None:
    running = _job_with_reservation(sessions, JobState.ACTIVE, "held.1")
    assert no_leaked_reservations(sessions, [running], [("rmB", "held.1")], grace=0).ok
    done = _job_with_reservation(sessions, JobState.DONE, "held.2")
    with session_scope(sessions) as session:
        session.execute(delete(Reservation).where(Reservation.name == "held.2"))
    assert no_leaked_reservations(sessions, [done], [("rmB", "held.2")], grace=0).ok
