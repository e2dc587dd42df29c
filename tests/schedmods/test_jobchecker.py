"""The job checker on a real database: accounting, purge, deferral and retry."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grid_tasks.db import repository, session_scope
from grid_tasks.db.models import AccountingRecord, Job
from grid_tasks.db.transitions import record_transition
from grid_tasks.errors import ConfigError, GridTasksError
from grid_tasks.maui import Node, Observers, Scheduler
from grid_tasks.maui.cfg import parse_maui_config
from grid_tasks.schedmods import (
    DeferPolicy,
    JobChecker,
    ModuleContext,
    check_jobs,
    defer_job,
    load_modules,
)
from grid_tasks.states import JobState, MauiJobState

T0 = 1_800_000_000.0


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


def add_job(session: Session, rm: str, *, end: JobState | None = None, ran: float = 0.0,
            ended: float = T0, procs: int = 2, cancelled: bool = False) -> int:
    """A job submitted, maybe run for ``ran`` seconds, maybe finished at ``ended``."""
    job = Job(rm=rm, user="ann", procs=procs, tasks=procs, submit_time=at(ended - ran - 50))
    session.add(job)
    session.flush()
    record_transition(session, job, JobState.PENDING, "submitted", at(ended - ran - 50))
    if ran:
        record_transition(session, job, JobState.ACTIVE, "started", at(ended - ran))
    if end is not None:
        if cancelled:
            job.gram_error = "USER_CANCELLED"
        record_transition(session, job, end, "cancelled by user" if cancelled else None, at(ended))
    return job.id


def test_finished_and_cancelled_jobs_are_accounted_once(sessions: sessionmaker[Session]) -> None:
    with session_scope(sessions) as s:
        done = add_job(s, "rmA", end=JobState.DONE, ran=100.0)
        cancelled = add_job(s, "rmA", end=JobState.FAILED, cancelled=True)
        pending = add_job(s, "rmA")
        other_rm = add_job(s, "rmB", end=JobState.DONE, ran=10.0)
    checker = JobChecker(parse_maui_config(""), ModuleContext(rm="rmA", sessions=sessions))
    first = checker.check(T0 + 1)
    assert first.accounted == [done, cancelled] and first.cancelled == [cancelled]
    assert checker.check(T0 + 2).accounted == []  # idempotent
    with session_scope(sessions) as s:
        records = {r.job_id: r for r in repository.accounting_records(s)}
        assert set(records) == {done, cancelled}  # rmB is another checker's
        assert records[done].proc_seconds == pytest.approx(200.0)
        assert records[cancelled].final_state is JobState.FAILED
        assert records[cancelled].wall_seconds == 0.0
        assert repository.get_job(s, pending).state is JobState.PENDING
    grid_wide = JobChecker(parse_maui_config(""), ModuleContext(sessions=sessions))
    assert grid_wide.check(T0 + 3).accounted == [other_rm]


def test_purge_after_jobpurgetime_keeps_accounting(sessions: sessionmaker[Session]) -> None:
    with session_scope(sessions) as s:
        old = add_job(s, "rmA", end=JobState.DONE, ran=5.0, ended=T0 - 7200)
        recent = add_job(s, "rmA", end=JobState.DONE, ran=5.0, ended=T0 - 60)
        old_b = add_job(s, "rmB", end=JobState.DONE, ran=5.0, ended=T0 - 7200)
    cfg = parse_maui_config("JOBPURGETIME 01:00:00\n")
    report = JobChecker(cfg, ModuleContext(rm="rmA", sessions=sessions)).check(T0)
    assert report.purged == 1 and sorted(report.accounted) == [old, recent]
    with session_scope(sessions) as s:
        left = set(s.scalars(select(Job.id)))
        assert left == {recent, old_b}  # rmB's old job waits for its own checker
        assert set(s.scalars(select(AccountingRecord.job_id))) == {old, recent}
    keep = parse_maui_config("")  # JOBPURGETIME 0: remembered forever
    with session_scope(sessions) as s:
        assert check_jobs(s, now=T0 + 10**6, policy=DeferPolicy(), purge_after=float(
            keep.get("JOBPURGETIME"))).purged == 0


def test_deferred_jobs_return_to_idle_after_defertime(sessions: sessionmaker[Session]) -> None:
    policy = DeferPolicy(defer_time=300.0, defer_count=2)
    with session_scope(sessions) as s:
        job = add_job(s, "rmA")
        assert defer_job(s, job, T0, policy, "no node has the feature") is MauiJobState.DEFERRED
    with session_scope(sessions) as s:
        assert check_jobs(s, now=T0 + 299, policy=policy, purge_after=0).released == []
        assert check_jobs(s, now=T0 + 300, policy=policy, purge_after=0).released == [job]
        assert repository.get_job(s, job).maui_state is MauiJobState.IDLE


def test_deferral_past_defercount_is_a_batch_hold(sessions: sessionmaker[Session]) -> None:
    policy = DeferPolicy(defer_time=10.0, defer_count=2)
    with session_scope(sessions) as s:
        job = add_job(s, "rmA")
    states = []
    for k in range(3):
        with session_scope(sessions) as s:
            states.append(defer_job(s, job, T0 + 100 * k, policy))
            check_jobs(s, now=T0 + 100 * k + 10, policy=policy, purge_after=0)
    assert states == [MauiJobState.DEFERRED, MauiJobState.DEFERRED, MauiJobState.HOLD]
    with session_scope(sessions) as s:
        row = repository.get_job(s, job)
        assert row.maui_state is MauiJobState.HOLD and row.holds == ["batch"]
        assert row.request["maui_defer"]["count"] == 3
        assert check_jobs(s, now=T0 + 10**5, policy=policy, purge_after=0).released == []


def test_a_job_deferred_elsewhere_is_adopted_then_released(sessions: sessionmaker[Session]) -> None:
    policy = DeferPolicy(defer_time=60.0, defer_count=5)
    with session_scope(sessions) as s:
        job = add_job(s, "rmA")
        repository.get_job(s, job).maui_state = MauiJobState.DEFERRED
    with session_scope(sessions) as s:
        assert check_jobs(s, now=T0, policy=policy, purge_after=0).released == []
    with session_scope(sessions) as s:
        assert check_jobs(s, now=T0 + 60, policy=policy, purge_after=0).released == [job]


def test_only_pending_jobs_can_be_deferred(sessions: sessionmaker[Session]) -> None:
    with session_scope(sessions) as s:
        done = add_job(s, "rmA", end=JobState.DONE, ran=1.0)
        with pytest.raises(GridTasksError, match="only a pending job"):
            defer_job(s, done, T0, DeferPolicy())


def test_as_a_module_inside_the_callers_session(sessions: sessionmaker[Session]) -> None:
    cfg = parse_maui_config("MODULES jobchecker\nDEFERTIME 00:01:00\n")
    with session_scope(sessions) as s:
        done = add_job(s, "rmA", end=JobState.DONE, ran=3.0)
        deferred = add_job(s, "rmA")
        defer_job(s, deferred, T0, DeferPolicy.from_config(cfg))
    with session_scope(sessions) as s:  # the live iteration's transaction
        [checker] = load_modules(cfg, ModuleContext(rm="rmA", session=s))
        Observers([checker]).iterate(Scheduler([Node("n1", 2)]), T0 + 61)
        assert checker.last is not None and checker.last.accounted == [done]
        assert checker.last.released == [deferred]
    with session_scope(sessions) as s:  # committed by the caller
        assert repository.get_job(s, deferred).maui_state is MauiJobState.IDLE
        assert [r.job_id for r in repository.accounting_records(s)] == [done]


def test_failures_are_recorded_not_raised_and_config_is_checked(tmp_path) -> None:
    from grid_tasks.db import get_engine, session_factory

    broken = session_factory(get_engine(f"sqlite:///{tmp_path / 'empty.db'}"))  # no tables
    checker = JobChecker(parse_maui_config(""), ModuleContext(sessions=broken))
    Observers([checker]).iterate(Scheduler([Node("n1", 1)]), T0)
    assert checker.errors and "OperationalError" in checker.errors[0]
    with pytest.raises(ConfigError, match="session factory"):
        JobChecker(parse_maui_config(""), ModuleContext())
