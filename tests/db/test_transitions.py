"""record_transition: job row and history in one go, GRAM rules, concurrent updates."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grid_tasks.db import (
    ConcurrentUpdateError,
    InvalidTransitionError,
    Job,
    JobStateHistory,
    record_transition,
    repository,
    session_scope,
)
from grid_tasks.errors import GridTasksError, NotFoundError
from grid_tasks.states import JobState, MauiJobState

from .conftest import T0


def _submitted(session: Session) -> Job:
    job = Job(rm="rmA", user="ada", procs=2, submit_time=T0)
    session.add(job)
    session.flush()
    record_transition(session, job, JobState.PENDING, "submitted", T0)
    session.commit()
    return job


def test_a_full_life_is_recorded_in_order(grid: Session) -> None:
    job = _submitted(grid)
    record_transition(grid, job.id, JobState.ACTIVE, "launched", T0 + timedelta(seconds=5))
    record_transition(grid, job, "DONE", "exit 0", T0 + timedelta(seconds=65))
    grid.commit()
    grid.expunge_all()
    got = grid.get(Job, job.id)
    assert got.state is JobState.DONE and got.maui_state is MauiJobState.COMPLETED
    assert got.start_time == T0 + timedelta(seconds=5)
    assert got.end_time == T0 + timedelta(seconds=65)
    steps = [(h.from_state, h.to_state, h.reason) for h in repository.job_history(grid, job.id)]
    assert steps == [
        (JobState.UNSUBMITTED, JobState.PENDING, "submitted"),
        (JobState.PENDING, JobState.ACTIVE, "launched"),
        (JobState.ACTIVE, JobState.DONE, "exit 0"),
    ]


def test_failure_keeps_the_first_reason(grid: Session) -> None:
    job = _submitted(grid)
    entry = record_transition(grid, job, JobState.FAILED, "node a1 lost", T0)
    assert entry is not None and entry.to_state is JobState.FAILED
    assert job.failure_reason == "node a1 lost" and job.maui_state is MauiJobState.REMOVED
    assert job.start_time is None and job.end_time == T0


def test_repeating_the_current_state_is_a_no_op(grid: Session) -> None:
    job = _submitted(grid)
    assert record_transition(grid, job, JobState.PENDING, "redelivered", T0) is None
    grid.commit()
    count = len(grid.scalars(select(JobStateHistory).where(JobStateHistory.job_id == job.id)).all())
    assert count == 1


def test_requeue_then_restart_sets_a_new_start_time(grid: Session) -> None:
    job = _submitted(grid)
    record_transition(grid, job, JobState.ACTIVE, "launched", T0 + timedelta(seconds=1))
    record_transition(grid, job, JobState.SUSPENDED, "preempted", T0 + timedelta(seconds=2))
    record_transition(grid, job, JobState.ACTIVE, "resumed", T0 + timedelta(seconds=3))
    assert job.start_time == T0 + timedelta(seconds=1)  # a resume is not a new start
    record_transition(grid, job, JobState.PENDING, "node lost, requeued", T0 + timedelta(seconds=4))
    record_transition(grid, job, JobState.ACTIVE, "relaunched", T0 + timedelta(seconds=9))
    assert job.start_time == T0 + timedelta(seconds=9)


@pytest.mark.parametrize("final", [JobState.DONE, JobState.FAILED])
def test_terminal_states_are_final(grid: Session, final: JobState) -> None:
    job = _submitted(grid)
    record_transition(grid, job, final, "end", T0)
    with pytest.raises(InvalidTransitionError, match="already"):
        record_transition(grid, job, JobState.ACTIVE, "zombie", T0)


def test_refusals_are_typed(grid: Session) -> None:
    job = _submitted(grid)
    with pytest.raises(InvalidTransitionError, match="UNSUBMITTED"):
        record_transition(grid, job, JobState.UNSUBMITTED, None, T0)
    with pytest.raises(InvalidTransitionError, match="unknown job state 'RUNNING'"):
        record_transition(grid, job, "RUNNING", None, T0)
    with pytest.raises(NotFoundError, match="unknown job 999999"):
        record_transition(grid, 999999, JobState.ACTIVE, None, T0)


def test_two_sessions_updating_one_job_cannot_both_win(
    grid: Session, factory: sessionmaker[Session]
) -> None:
    job_id = _submitted(grid).id
    with factory() as first, factory() as second:
        mine = first.get(Job, job_id)
        theirs = second.get(Job, job_id)
        record_transition(first, mine, JobState.ACTIVE, "scheduler A", T0)
        first.commit()
        with pytest.raises(ConcurrentUpdateError) as err:
            record_transition(second, theirs, JobState.FAILED, "scheduler B", T0)
        assert isinstance(err.value, GridTasksError)
        second.rollback()
    with factory() as check:
        got = check.get(Job, job_id)
        assert got.state is JobState.ACTIVE and got.version == 3
        reasons = [h.reason for h in repository.job_history(check, job_id)]
        assert reasons == ["submitted", "scheduler A"]


def test_session_scope_reports_a_lost_race_typed_and_rolls_back(
    grid: Session, factory: sessionmaker[Session]
) -> None:
    job_id = _submitted(grid).id
    with pytest.raises(ConcurrentUpdateError):
        with session_scope(factory) as outer:
            stale = outer.get(Job, job_id)
            with session_scope(factory) as inner:
                inner.get(Job, job_id).priority = 99
            stale.priority = 1  # flushed at commit, against the old version
    with factory() as check:
        assert check.get(Job, job_id).priority == 99


def test_retry_after_a_lost_race_succeeds(grid: Session, factory: sessionmaker[Session]) -> None:
    job_id = _submitted(grid).id
    with factory() as first, factory() as second:
        theirs = second.get(Job, job_id)
        record_transition(first, job_id, JobState.ACTIVE, "A", T0)
        first.commit()
        with pytest.raises(ConcurrentUpdateError):
            record_transition(second, theirs, JobState.ACTIVE, "B", T0)
        second.rollback()
        # The loser reloads, sees the job already ACTIVE, and the repeat is a no-op.
        assert record_transition(second, job_id, JobState.ACTIVE, "B", T0) is None


def test_concurrent_writers_with_retry_lose_no_update(
    grid: Session, factory: sessionmaker[Session]
) -> None:
    """Real threads racing on one row: every increment lands exactly once."""
    import threading

    job_id = _submitted(grid).id
    writers, rounds = 4, 10

    def bump() -> None:
        for _ in range(rounds):
            while True:
                try:
                    with session_scope(factory) as s:
                        s.get(Job, job_id).priority += 1
                    break
                except ConcurrentUpdateError:
                    continue  # reload and try again, as callers should

    threads = [threading.Thread(target=bump) for _ in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    with factory() as check:
        assert check.get(Job, job_id).priority == writers * rounds
