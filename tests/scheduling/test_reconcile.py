"""Ends and cancels SQL missed during a database outage, written by the RM's iteration
(issue 21, finding 3: finished jobs stayed ACTIVE forever, their nodes held, the
RM's queue stopped, and a scheduler restart did not help).

Real SQL, real Redis, the real iteration and the node side's real ``report_finished``;
the report message is lost on purpose (a sender that drops it), as a database outage
longer than the old bounded retry lost it.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Any

import pytest

from grid_tasks import db
from grid_tasks.db.models import AccountingRecord
from grid_tasks.errors import StorageUnavailable
from grid_tasks.gram import keys
from grid_tasks.gram.launch import requests_for
from grid_tasks.gram.records import Outbox
from grid_tasks.gram.report import PARTS_TTL_S, NodeContext, report_finished
from grid_tasks.gram.report_sender import FINISHED, Report
from grid_tasks.gram.report_writer import write_reports
from grid_tasks.gram.status import CancelAccepted
from grid_tasks.gram.submission import accept_cancel
from grid_tasks.scheduling.iteration import run_iteration
from grid_tasks.scheduling.reconcile import GRACE_S
from grid_tasks.scheduling.recovery import NodeFailurePolicy, recover
from grid_tasks.services import Services
from grid_tasks.states import JobState, MauiJobState
from tests.scheduling.test_modules import _grid, _submit

WIDE = "&(executable=/bin/true)(count=4)"  # both nodes of rmA (2 processors each)


class Dropped:
    """A report sender that loses every message (the outage that outlived the retries)."""

    def __init__(self) -> None:
        self.lost: list[Report] = []

    def write(self, report: Report) -> None:
        self.lost.append(report)


@pytest.fixture
def rm(tmp_path, settings, celery_app_factory):
    app, client, registry, sessions, settings = _grid(tmp_path, settings, celery_app_factory,
                                                      "")
    yield app, client, registry, sessions, settings
    client.close()
    db.dispose_engines()


def _iterate(rm: Any, now: float) -> Any:
    app, client, registry, sessions, settings = rm
    return run_iteration(app, "rmA", sessions=sessions, redis=client, registry=registry,
                         now=now, settings=settings)


def _row(sessions: Any, job_id: int) -> Any:
    with db.session_scope(sessions) as s:
        return db.repository.get_job(s, job_id)


def _running(rm: Any, now: float, *, confirmed: bool = True) -> tuple[int, list[Any]]:
    """A 4-process job started on node1 and node2 (ACTIVE in SQL unless not
    ``confirmed``); its launch requests."""
    app, client, registry, sessions, settings = rm
    job = _submit(sessions, WIDE)
    assert _iterate(rm, now).started == [job]
    with db.session_scope(sessions) as s:
        row = db.repository.get_job(s, job)
        if confirmed:
            db.record_transition(s, row, JobState.ACTIVE, "started on node1",
                                 datetime.fromtimestamp(now, timezone.utc))
            row.maui_state = MauiJobState.RUNNING
        reqs = requests_for(row.id, "rmA", row.launch_token, row.request,
                            row.nodes_allocated, row.walltime)
    for req in reqs:  # the job managers' leases, as report_started leaves them
        client.set(keys.lease_key(job, req.node), req.token, px=60_000)
    return job, reqs


def _finish_losing_the_report(rm: Any, reqs: list[Any], codes: dict[str, int]) -> Dropped:
    """Both job managers end their parts through the real report_finished; the report
    message the last one sends is lost."""
    app, client, registry, sessions, settings = rm
    sender = Dropped()
    ctx = NodeContext(app, settings, client, 1.0, 2.0, sender=sender)
    for req in reqs:
        part = {"exit_codes": {str(req.rank_offset + i): codes.get(req.node, 0)
                               for i in range(req.tasks)},
                "reason": None, "code": None, "started": time.time() - 1}
        report_finished(ctx, req, json.dumps(part))
    return sender


def _accounted(sessions: Any, job_id: int) -> int:
    with db.session_scope(sessions) as s:
        return s.query(AccountingRecord).filter_by(job_id=job_id).count()


def test_an_end_only_in_redis_is_recorded_by_the_iteration(rm) -> None:
    app, client, registry, sessions, settings = rm
    t0 = time.time()
    job, reqs = _running(rm, t0)
    queued = _submit(sessions, WIDE)  # waits for job's nodes
    sender = _finish_losing_the_report(rm, reqs, {"node1": 0, "node2": 3})
    assert len(sender.lost) == 1 and sender.lost[0].kind == FINISHED
    parts = keys.parts_key(job, reqs[0].token)
    assert client.ttl(parts) > 7 * 24 * 3600  # kept until the end is in SQL
    # the finding: both leases gone and both parts reported, so recovery never takes
    # the job for lost; it stays ACTIVE and holds its nodes
    with db.session_scope(sessions) as s:
        assert recover(s, "rmA", datetime.fromtimestamp(t0 + 600, timezone.utc), client,
                       Outbox(), NodeFailurePolicy.FAIL, 5.0) == []
    assert _row(sessions, job).state is JobState.ACTIVE
    first = _iterate(rm, t0 + 1)  # seen: the report may be a few ms behind
    assert first.reconciled == [] and first.started == []
    assert _row(sessions, job).state is JobState.ACTIVE
    second = _iterate(rm, t0 + 1 + GRACE_S)
    assert second.reconciled == [job]
    row = _row(sessions, job)
    assert row.state is JobState.DONE and row.exit_code == 3
    assert row.request["exit_codes"] == {"0": 0, "1": 0, "2": 3, "3": 3}
    assert second.started == [queued]  # the freed nodes serve the queue at once
    assert _accounted(sessions, job) == 1
    assert 0 < client.ttl(parts) <= PARTS_TTL_S
    with db.session_scope(sessions) as s:
        history = [h.to_state for h in db.repository.job_history(s, job)]
    assert sorted(h.value for h in history) == ["ACTIVE", "DONE", "PENDING"]
    # the lost report, delivered late after all, changes nothing: one end, one record
    write_reports(sessions, sender.lost)
    assert _row(sessions, job).version == row.version
    assert _accounted(sessions, job) == 1
    assert _iterate(rm, t0 + 10).reconciled == []


def test_a_recorded_end_is_not_written_twice(rm) -> None:
    app, client, registry, sessions, settings = rm
    t0 = time.time()
    job, reqs = _running(rm, t0)
    sender = _finish_losing_the_report(rm, reqs, {})
    _iterate(rm, t0 + 1)
    write_reports(sessions, sender.lost)  # the report lands within the grace
    version = _row(sessions, job).version
    assert _iterate(rm, t0 + 1 + GRACE_S).reconciled == []
    assert _row(sessions, job).version == version and _accounted(sessions, job) == 1


def test_an_unconfirmed_launch_whose_parts_all_ended_is_ended_not_relaunched(
        rm, monkeypatch) -> None:
    monkeypatch.setenv("GRID_TASKS_LAUNCH_TIMEOUT", "5")
    app, client, registry, sessions, settings = rm
    t0 = time.time()
    job, reqs = _running(rm, t0, confirmed=False)  # ACTIVE was lost to the outage too
    _finish_losing_the_report(rm, reqs, {})
    report = _iterate(rm, t0 + 6)  # past the launch timeout: no grace, or recovery
    assert report.reconciled == [job]  # would roll it back and run it a second time
    assert job not in report.recovered and report.started == []
    row = _row(sessions, job)
    assert row.state is JobState.DONE and row.launch_token == reqs[0].token


def test_a_job_with_a_part_still_running_is_left_alone(rm) -> None:
    app, client, registry, sessions, settings = rm
    t0 = time.time()
    job, reqs = _running(rm, t0)
    _finish_losing_the_report(rm, reqs[:1], {})  # node2's part still runs
    _iterate(rm, t0 + 1)
    assert _iterate(rm, t0 + 1 + GRACE_S).reconciled == []
    assert _row(sessions, job).state is JobState.ACTIVE


def test_parts_of_another_launch_are_not_taken_for_this_one(rm) -> None:
    app, client, registry, sessions, settings = rm
    t0 = time.time()
    job, reqs = _running(rm, t0)
    stale = [type(r)(**{**r.__dict__, "token": "an-older-launch"}) for r in reqs]
    _finish_losing_the_report(rm, stale, {})
    _iterate(rm, t0 + 1)
    assert _iterate(rm, t0 + 1 + GRACE_S).reconciled == []
    assert _row(sessions, job).state is JobState.ACTIVE


def test_parts_naming_a_node_the_job_never_had_are_refused(rm) -> None:
    app, client, registry, sessions, settings = rm
    t0 = time.time()
    job, reqs = _running(rm, t0)
    _finish_losing_the_report(rm, reqs, {})
    client.hset(keys.parts_key(job, reqs[0].token), "intruder", json.dumps({}))
    _iterate(rm, t0 + 1)
    assert _iterate(rm, t0 + 1 + GRACE_S).reconciled == [job]  # looked at, refused
    assert _row(sessions, job).state is JobState.ACTIVE


def _outage(settings: Any) -> StorageUnavailable:
    return StorageUnavailable("sqlite:///x", "database or disk is full")


def test_a_cancel_taken_during_an_outage_is_applied_once_sql_is_back(rm) -> None:
    app, client, registry, sessions, settings = rm
    t0 = time.time()
    running, reqs = _running(rm, t0)
    idle = _submit(sessions, WIDE)
    services = Services(settings, app=app)
    for job in (running, idle):
        answer = accept_cancel(services, job, "rmA", None, False, _outage(settings))
        assert isinstance(answer, CancelAccepted) and "accepted" in answer.reason
        assert client.exists(keys.cancel_key(job))  # job managers act on it at once
    _iterate(rm, t0 + 1)
    row = _row(sessions, idle)
    assert row.state is JobState.FAILED and row.gram_error == "USER_CANCELLED"
    assert _row(sessions, running).state is JobState.ACTIVE  # its managers kill it
    _iterate(rm, t0 + 1.5)  # the idle job's end is committed: its entry goes
    pending = client.hgetall(keys.pending_cancels_key("rmA"))
    assert list(pending) == [str(running).encode()]  # until its end is in SQL
    _finish_losing_the_report(rm, reqs, {"node1": 143, "node2": 143})
    _iterate(rm, t0 + 2)
    _iterate(rm, t0 + 2 + GRACE_S)
    assert _row(sessions, running).state.terminal
    _iterate(rm, t0 + 3 + GRACE_S)
    assert client.hgetall(keys.pending_cancels_key("rmA")) == {}


def test_a_running_launch_whose_active_report_was_lost_is_confirmed_not_rolled_back(
        rm, monkeypatch) -> None:
    monkeypatch.setenv("GRID_TASKS_LAUNCH_TIMEOUT", "5")
    app, client, registry, sessions, settings = rm
    t0 = time.time()
    job, reqs = _running(rm, t0, confirmed=False)
    within = _iterate(rm, t0 + 1)  # not overdue yet: left to its report
    assert within.reconciled == [] and _row(sessions, job).state is JobState.PENDING
    client.set(keys.started_key(job, reqs[0].token), "node1")  # as report_started leaves it
    report = _iterate(rm, t0 + 6)
    assert report.reconciled == [job] and job not in report.recovered
    row = _row(sessions, job)
    assert row.state is JobState.ACTIVE and row.launch_token == reqs[0].token
    assert client.get(keys.token_key(job)) is not None  # its parts keep running


def test_an_unconfirmed_launch_nobody_started_is_still_rolled_back(rm, monkeypatch) -> None:
    monkeypatch.setenv("GRID_TASKS_LAUNCH_TIMEOUT", "5")
    app, client, registry, sessions, settings = rm
    t0 = time.time()
    job, reqs = _running(rm, t0, confirmed=False)
    report = _iterate(rm, t0 + 6)
    assert report.reconciled == [] and job in report.recovered
