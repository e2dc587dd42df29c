"""The shared queries of grid_tasks.db.repository."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from grid_tasks.db import (
    CoallocatedJob,
    Job,
    JobStateHistory,
    RecordError,
    Reservation,
    Subjob,
    record_transition,
    repository,
)
from grid_tasks.errors import NotFoundError
from grid_tasks.states import JobState

from .conftest import T0


def _jobs(session: Session) -> list[Job]:
    jobs = [
        Job(rm="rmA", priority=1, submit_time=T0, contact="c1", idempotency_key="k1"),
        Job(rm="rmA", priority=5, submit_time=T0 + timedelta(seconds=9)),
        Job(rm="rmA", priority=5, submit_time=T0 + timedelta(seconds=1)),
        Job(rm="rmB", priority=9, submit_time=T0),
    ]
    session.add_all(jobs)
    session.flush()
    for job in jobs:
        record_transition(session, job, JobState.PENDING, "queued", T0)
    session.commit()
    return jobs


def test_queue_order_is_priority_then_age_per_rm(grid: Session) -> None:
    j1, j2, j3, _ = _jobs(grid)
    record_transition(grid, j1, JobState.ACTIVE, "run", T0)
    pending = repository.jobs_in_states(grid, "rmA", [JobState.PENDING])
    assert [j.id for j in pending] == [j3.id, j2.id]
    either = repository.jobs_in_states(grid, "rmA", ["PENDING", "ACTIVE"])
    assert [j.id for j in either] == [j3.id, j2.id, j1.id]


def test_lookups_by_id_contact_and_idempotency_key(grid: Session) -> None:
    j1, *_ = _jobs(grid)
    assert repository.get_job(grid, j1.id) is j1
    assert repository.get_job(grid, j1.id, for_update=True) is j1
    assert repository.get_job_by_contact(grid, "c1") is j1
    assert repository.find_job_by_idempotency_key(grid, "k1") is j1
    assert repository.find_job_by_idempotency_key(grid, "nope") is None
    with pytest.raises(NotFoundError, match="unknown job 424242"):
        repository.get_job(grid, 424242)
    with pytest.raises(NotFoundError, match="unknown job contact 'c9'"):
        repository.get_job_by_contact(grid, "c9")
    with pytest.raises(NotFoundError):
        repository.job_history(grid, 424242)


def test_rm_and_node_listings(grid: Session) -> None:
    assert [rm.name for rm in repository.list_rms(grid)] == ["rmA", "rmB"]
    assert [n.name for n in repository.list_nodes(grid, "rmB")] == ["b1"]
    with pytest.raises(NotFoundError, match="unknown resource manager 'rmC'"):
        repository.list_nodes(grid, "rmC")


def test_reservations_overlapping_a_window(grid: Session) -> None:
    hour = timedelta(hours=1)
    grid.add_all([
        Reservation(name="early", rm="rmA", start_time=T0, end_time=T0 + hour),
        Reservation(name="late", rm="rmA", start_time=T0 + 2 * hour, end_time=T0 + 3 * hour),
        Reservation(name="other", rm="rmB", start_time=T0, end_time=T0 + 3 * hour),
        Reservation(name="grid", rm=None, start_time=T0, end_time=T0 + hour),
    ])
    grid.commit()
    names = lambda rs: [r.name for r in rs]  # noqa: E731
    # Half-open intervals: a reservation ending exactly at the window start does not overlap.
    assert names(repository.reservations_overlapping(grid, "rmA", T0 + hour, T0 + 2 * hour)) == []
    assert names(repository.reservations_overlapping(
        grid, "rmA", T0 + hour / 2, T0 + 2 * hour + timedelta(seconds=1))) == ["early", "late"]
    assert sorted(names(repository.reservations_overlapping(grid, None, T0, T0 + hour))) == [
        "early", "grid", "other"]
    assert repository.get_reservation(grid, "rmB", "other").rm == "rmB"
    assert repository.get_reservation(grid, None, "grid").rm is None
    with pytest.raises(NotFoundError, match="unknown reservation 'late' on rmB"):
        repository.get_reservation(grid, "rmB", "late")


def test_coallocation_lookup_loads_subjobs(grid: Session) -> None:
    co = CoallocatedJob(subjobs=[Subjob(label="a", rm="rmA"), Subjob(label="b", rm="rmB",
                                                                      position=1)])
    grid.add(co)
    grid.commit()
    grid.expunge_all()
    got = repository.get_coallocation(grid, co.id)
    assert [s.label for s in got.subjobs] == ["a", "b"]
    with pytest.raises(NotFoundError):
        repository.get_coallocation(grid, co.id + 1000)


def test_accounting_written_once_per_finished_job(grid: Session) -> None:
    job = Job(rm="rmA", user="ada", group="g", account="acct", procs=4, submit_time=T0,
              nodes_allocated={"a1": 4})
    grid.add(job)
    grid.flush()
    with pytest.raises(RecordError, match="only finished jobs"):
        repository.record_accounting(grid, job)
    record_transition(grid, job, JobState.ACTIVE, "run", T0 + timedelta(seconds=30))
    job.exit_code = 0
    record_transition(grid, job, JobState.DONE, "exit 0", T0 + timedelta(seconds=90))
    record = repository.record_accounting(grid, job)
    assert repository.record_accounting(grid, job) is record
    grid.commit()
    assert (record.wall_seconds, record.proc_seconds, record.wait_seconds) == (60.0, 240.0, 30.0)
    assert (record.user, record.account, record.nodes, record.exit_status) == (
        "ada", "acct", {"a1": 4}, 0)
    assert repository.accounting_records(grid, user="ada") == [record]
    assert repository.accounting_records(grid, rm="rmB") == []
    assert repository.accounting_records(grid, since=T0 + timedelta(seconds=91)) == []
    assert repository.accounting_records(grid, until=T0 + timedelta(seconds=91)) == [record]


def test_accounting_of_a_job_that_never_started(grid: Session) -> None:
    job = Job(rm="rmA", procs=2, submit_time=T0)
    grid.add(job)
    grid.flush()
    record_transition(grid, job, JobState.FAILED, "cancelled while idle", T0)
    record = repository.record_accounting(grid, job)
    assert record.wall_seconds == 0.0 and record.final_state is JobState.FAILED
    assert record.wait_seconds is None


def _finish(session: Session, user: str, rm: str, procs: int, wait: int, run: int,
            end_offset: int = 0) -> Job:
    submit = T0 + timedelta(seconds=end_offset)
    job = Job(rm=rm, user=user, group="g-" + user, procs=procs, submit_time=submit)
    session.add(job)
    session.flush()
    record_transition(session, job, JobState.ACTIVE, "run", submit + timedelta(seconds=wait))
    record_transition(session, job, JobState.DONE, "ok",
                      submit + timedelta(seconds=wait + run))
    repository.record_accounting(session, job)
    return job


def test_usage_totals_per_credential(grid: Session) -> None:
    _finish(grid, "ada", "rmA", procs=4, wait=10, run=100)   # 400 proc-s
    _finish(grid, "ada", "rmB", procs=1, wait=30, run=50)    # 50
    _finish(grid, "bob", "rmA", procs=2, wait=0, run=1000)   # 2000
    grid.commit()
    by_user = repository.usage_by(grid, "user")
    assert [(u.key, u.jobs, u.proc_seconds, u.wall_seconds, u.wait_seconds) for u in by_user] == [
        ("bob", 1, 2000.0, 1000.0, 0.0), ("ada", 2, 450.0, 150.0, 40.0)]
    assert by_user[0].proc_hours == pytest.approx(2000 / 3600)
    by_rm = {u.key: u.jobs for u in repository.usage_by(grid, "rm")}
    assert by_rm == {"rmA": 2, "rmB": 1}
    assert [u.key for u in repository.usage_by(grid, "group")] == ["g-bob", "g-ada"]
    with pytest.raises(RecordError, match="cannot group usage by 'colour'"):
        repository.usage_by(grid, "colour")


def test_usage_window_counts_jobs_by_end_time(grid: Session) -> None:
    _finish(grid, "ada", "rmA", procs=1, wait=0, run=10)                      # ends T0+10
    _finish(grid, "ada", "rmA", procs=1, wait=0, run=10, end_offset=3600)     # ends T0+3610
    grid.commit()
    late = repository.usage_by(grid, since=T0 + timedelta(seconds=11))
    early = repository.usage_by(grid, until=T0 + timedelta(seconds=11))
    assert [(u.key, u.jobs) for u in late] == [("ada", 1)]
    assert [(u.key, u.jobs) for u in early] == [("ada", 1)]
    assert repository.usage_by(grid, since=T0 + timedelta(hours=2)) == []


def test_purge_keeps_unaccounted_and_recent_jobs(grid: Session) -> None:
    old = _finish(grid, "ada", "rmA", procs=1, wait=0, run=10)
    recent = _finish(grid, "ada", "rmA", procs=1, wait=0, run=10, end_offset=7200)
    unaccounted = Job(rm="rmA", submit_time=T0)
    grid.add(unaccounted)
    grid.flush()
    record_transition(grid, unaccounted, JobState.FAILED, "lost", T0 + timedelta(seconds=5))
    running = Job(rm="rmA", submit_time=T0)
    grid.add(running)
    grid.commit()
    assert repository.purge_finished_jobs(grid, T0 + timedelta(hours=1)) == 1
    grid.commit()
    left = {j.id for j in grid.scalars(select(Job))}
    assert left == {recent.id, unaccounted.id, running.id}
    assert [r.job_id for r in repository.accounting_records(grid)] == [old.id, recent.id]
    history = grid.scalars(select(JobStateHistory).where(JobStateHistory.job_id == old.id))
    assert history.all() == []
