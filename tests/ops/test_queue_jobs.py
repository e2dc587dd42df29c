"""showq, checkjob, checknode and canceljob's checks on rows stored through grid_tasks.db."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest

from grid_tasks.db import Reservation, ReservationKind, record_transition
from grid_tasks.errors import NotFoundError
from grid_tasks.node.registry import NodeStatus
from grid_tasks.ops import (
    JobFinishedError, build_queue, cancel_jobs, check_job, check_node, diagnose_priority,
)
from grid_tasks.ops.plan import load_plan
from grid_tasks.states import JobState, NodeState

from .conftest import NOW


def test_showq_sections_summary_and_order(session, add_job):
    running = add_job("rmA", user="ann", state=JobState.ACTIVE, tasks=3, nodes={"a1": 3},
                      walltime=3600, started=-600)
    low = add_job("rmA", user="bob", submitted=-900)
    high = add_job("rmA", user="alice", submitted=-100)  # USERCFG[alice] PRIORITY=500
    held = add_job("rmA", user="dan", holds=["user"])
    waits = add_job("rmA", user="eve", dependencies=[running.id])
    add_job("rmA", state=JobState.DONE, started=-5000, ended=-4000)
    add_job("rmB", user="other")
    queue = build_queue(session, "rmA", NOW)
    assert [r.job_id for r in queue.active] == [running.id]
    assert queue.active[0].remaining == 3000 and queue.active[0].state == "Running"
    assert [r.job_id for r in queue.idle] == [high.id, low.id]  # by the scheduler's priority
    assert {r.job_id: r.state for r in queue.blocked} == {held.id: "Hold", waits.id: "Blocked"}
    summary = queue.to_dict()["summary"]
    assert summary["procs_active"] == 3 and summary["procs_total"] == 8
    assert summary["procs_percent"] == 37.5
    assert (summary["nodes_active"], summary["nodes_total"]) == (1, 2)
    assert build_queue(session, None, NOW).total_jobs == 6


def test_one_priority_for_showq_checkjob_and_diagnose(session, add_job):
    """The idle job's priority is the scheduler's (credentials, queue time), the same
    number in showq, checkjob and diagnose -p; a running job has none."""
    idle = add_job("rmA", user="alice", submitted=-1800)  # USERCFG[alice] PRIORITY=500
    running = add_job("rmA", user="ann", state=JobState.ACTIVE, tasks=1, nodes={"a1": 1},
                      started=-60)
    [diag] = [p for p in diagnose_priority(session, "rmA", NOW) if p.job_id == idle.id]
    assert diag.total == pytest.approx(500 + 30)  # USER + QUEUETIME minutes
    queue = build_queue(session, "rmA", NOW).to_dict()
    assert [r["priority"] for r in queue["idle"]] == [round(diag.total, 4)]
    assert [r["priority"] for r in queue["active"]] == [None]
    plan = load_plan(session, "rmA", NOW)
    assert check_job(session, str(idle.id), NOW, plan).priority == pytest.approx(diag.total)
    assert check_job(session, str(running.id), NOW).to_dict()["priority"] is None


def test_showq_unknown_rm(session):
    with pytest.raises(NotFoundError, match="unknown resource manager 'rmZ'.*rmA, rmB"):
        build_queue(session, "rmZ", NOW)


def test_checkjob_reports_history_error_and_why(session, add_job):
    dep = add_job("rmA", user="ann")
    job = add_job("rmA", user="bob", account="proj", holds=["system"], dependencies=[dep.id],
                  state=JobState.UNSUBMITTED,
                  contact="gram://rmA/42")
    record_transition(session, job, JobState.PENDING, "queued", at=NOW - timedelta(seconds=60))
    session.commit()
    report = check_job(session, "gram://rmA/42", NOW)
    data = report.to_dict()
    assert data["job_id"] == job.id and data["section"] == "blocked"
    assert data["credentials"]["account"] == "proj"
    assert data["history"][-1]["to"] == "PENDING" and data["history"][-1]["reason"] == "queued"
    kinds = [r["kind"] for r in data["reasons"]]
    assert kinds[:2] == ["hold", "dependency"]
    assert f"depends on job {dep.id}, which is PENDING" in data["reasons"][1]["message"]
    failed = add_job("rmA", state=JobState.FAILED, gram_error="EXECUTABLE_NOT_FOUND",
                     gram_error_code=5, failure_reason="no /bin/nothing", exit_code=None)
    data = check_job(session, str(failed.id), NOW).to_dict()
    assert data["state"] == "Removed" and data["gram_error"] == "EXECUTABLE_NOT_FOUND"
    assert data["reasons"] == []


def test_checkjob_unknown(session):
    with pytest.raises(NotFoundError, match="unknown job 999"):
        check_job(session, "999", NOW)
    with pytest.raises(NotFoundError, match="unknown job 'gram://x'"):
        check_job(session, "gram://x", NOW)


def test_checknode_jobs_reservations_and_live_state(session, add_job):
    job = add_job("rmA", state=JobState.ACTIVE, tasks=3, nodes={"a1": 3}, started=-60)
    add_job("rmA", state=JobState.ACTIVE, tasks=2, nodes={"a2": 2}, started=-60)
    session.add(Reservation(name="maint", rm="rmA", kind=ReservationKind.ADMIN, nodes=["a1"],
                            resources={"tasks": 1, "procs_per_task": 1,
                                       "procs_by_node": {"a1": 1}},
                            start_time=NOW - timedelta(seconds=1),
                            end_time=NOW + timedelta(hours=1)))
    session.commit()
    live = NodeStatus("rmA", "a1", NodeState.IDLE, last_heartbeat=NOW.timestamp() - 2,
                      host="host-a1")
    report = check_node(session, "a1", NOW, live=live)
    data = report.to_dict()
    assert data["state"] == "Busy"  # 3 dedicated + 1 reserved = every processor
    assert data["configured"]["procs"] == 4 and data["dedicated"]["procs"] == 3
    assert data["available"]["procs"] == 0 and data["host"] == "host-a1"
    assert [j["job_id"] for j in data["jobs"]] == [job.id]
    assert [r["name"] for r in data["reservations"]] == ["maint"]
    other = check_node(session, "a2", NOW).to_dict()
    assert other["available"]["procs"] == 2 and other["reservations"] == []
    with pytest.raises(NotFoundError, match="unknown node 'zz'.*a1, a2, b1"):
        check_node(session, "zz", NOW)


class _Grid:
    def __init__(self):
        self.cancelled = []

    def cancel(self, job_id, *, rm=None):
        self.cancelled.append(job_id)


def test_canceljob_checks_every_job_first(session, add_job):
    idle = add_job("rmA")
    done = add_job("rmA", state=JobState.DONE, started=-100, ended=-10)
    grid = _Grid()
    with pytest.raises(JobFinishedError, match=f"job {done.id} already finished"):
        cancel_jobs(session, grid, [str(idle.id), str(done.id)])
    with pytest.raises(NotFoundError):
        cancel_jobs(session, grid, [str(idle.id), "4242"])
    assert grid.cancelled == []  # nothing disturbed
    assert cancel_jobs(session, grid, [str(idle.id)]) == [
        {"job_id": idle.id, "previous_state": "PENDING", "state": None, "settled": False}]
    assert grid.cancelled == [idle.id]


class _KillingGrid:
    """A Grid whose cancel of a running job answers ACTIVE (the kill is under way) and
    whose job ends FAILED after ``polls`` status questions."""

    def __init__(self, polls):
        self.polls = polls

    def cancel(self, job_id, *, rm=None):
        return SimpleNamespace(state=JobState.ACTIVE)

    def status(self, job_id, *, rm=None):
        self.polls -= 1
        return SimpleNamespace(state=JobState.ACTIVE if self.polls > 0 else JobState.FAILED)


def test_canceljob_reports_the_state_the_cancel_leads_to(session, add_job):
    running = add_job("rmA", state=JobState.ACTIVE, tasks=1, nodes={"a1": 1}, started=-60)
    assert cancel_jobs(session, _KillingGrid(polls=3), [str(running.id)]) == [
        {"job_id": running.id, "previous_state": "ACTIVE", "state": "FAILED", "settled": True}]
    slow = cancel_jobs(session, _KillingGrid(polls=10**6), [str(running.id)], settle=0.3)
    assert slow[0]["state"] == "ACTIVE" and slow[0]["settled"] is False


class _RacingGrid:
    """A Grid whose first cancel loses an optimistic-lock race with the scheduler."""

    def __init__(self):
        self.calls = 0

    def cancel(self, job_id, *, rm=None):
        from grid_tasks.db import ConcurrentUpdateError

        self.calls += 1
        if self.calls == 1:
            raise ConcurrentUpdateError("row changed by another session")
        return None


def test_canceljob_retries_a_lost_race(session, add_job):
    idle = add_job("rmA")
    grid = _RacingGrid()
    assert cancel_jobs(session, grid, [str(idle.id)])[0]["job_id"] == idle.id
    assert grid.calls == 2
