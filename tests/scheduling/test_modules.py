"""The live iteration with the scheduler modules of maui.cfg, and Maui's job deferral
(real SQL, real Redis, the real iteration; launches go to the broker, no node runs them)."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest
import redis

from grid_tasks import db
from grid_tasks.embedded.stack import prepare_database
from grid_tasks.gram import keys
from grid_tasks.gram.records import Outbox
from grid_tasks.gram.submission import build_job
from grid_tasks.node.registry import NodeRegistry
from grid_tasks.rsl import lower
from grid_tasks.scheduling.iteration import run_iteration
from grid_tasks.states import JobState, MauiJobState
from grid_tasks.topology import load_topology

TOPOLOGY = ('[rm.rmA]\npolicy_file = "maui.cfg"\n'
            '[rm.rmA.node.node1]\nprocs = 2\n[rm.rmA.node.node2]\nprocs = 2\n')


def _grid(tmp_path, settings, celery_app_factory, maui_cfg: str):
    (tmp_path / "maui.cfg").write_text(maui_cfg)
    (tmp_path / "grid.toml").write_text(TOPOLOGY)
    settings = settings.replace(topology_file=tmp_path / "grid.toml")
    prepare_database(settings, load_topology(settings.topology_file))
    client = redis.Redis.from_url(settings.redis_url)
    registry = NodeRegistry(client, 30)
    for node in ("node1", "node2"):
        registry.register("rmA", node, {}, {}, "test", time.time())
    return (celery_app_factory(settings), client, registry,
            db.session_factory(db.get_engine(settings.database_url)), settings)


@pytest.fixture
def cleanup(settings):
    yield
    db.dispose_engines()


def _submit(sessions, rsl="&(executable=/bin/true)(count=2)", now=None):
    with db.session_scope(sessions) as s:
        return build_job(s, "rmA", rsl, lower(rsl)[0], {"user": "u"},
                         now or datetime.now(timezone.utc), Outbox()).id


def test_modules_named_in_maui_cfg_run_in_the_live_iteration(tmp_path, settings,
                                                            celery_app_factory, cleanup):
    app, client, registry, sessions, settings = _grid(
        tmp_path, settings, celery_app_factory,
        "MODULES logger jobchecker\nLOGFILE sched.log\nLOGLEVEL 3\n")
    with db.session_scope(sessions) as s:  # a finished job nobody accounted yet
        row = build_job(s, "rmA", "&(executable=/bin/true)", lower("&(executable=/bin/true)")[0],
                        {"user": "u"}, datetime.now(timezone.utc), Outbox())
        db.record_transition(s, row, JobState.ACTIVE, "started", datetime.now(timezone.utc))
        db.record_transition(s, row, JobState.DONE, "exit code 0", datetime.now(timezone.utc))
        done = row.id
    waiting = _submit(sessions)
    report = run_iteration(app, "rmA", sessions=sessions, redis=client, registry=registry)
    assert report.started == [waiting]
    with db.session_scope(sessions) as s:  # the job checker accounted it in the iteration
        assert [r.job_id for r in db.repository.accounting_records(s)] == [done]
    log_file = settings.state_dir / "log" / "sched.log"  # LOGDIR defaults to log/
    try:
        assert "iteration at" in log_file.read_text()  # the logger module wrote it
    finally:
        from grid_tasks.schedmods.logrotate import _detach

        _detach(log_file)  # the handler lives per process: do not leak it into other tests
    client.close()


def test_unconfirmed_launch_is_deferred_then_released_after_defertime(
        tmp_path, settings, celery_app_factory, cleanup, monkeypatch):
    monkeypatch.setenv("GRID_TASKS_LAUNCH_TIMEOUT", "1")
    app, client, registry, sessions, _ = _grid(tmp_path, settings, celery_app_factory,
                                               "DEFERTIME 00:00:30\nDEFERCOUNT 1\n")
    job = _submit(sessions)
    t0 = time.time()
    assert run_iteration(app, "rmA", sessions=sessions, redis=client, registry=registry,
                         now=t0).started == [job]
    with db.session_scope(sessions) as s:  # nobody ran it: no lease, no part reported
        db.repository.get_job(s, job).start_time = datetime.now(timezone.utc) - timedelta(
            seconds=5)
    report = run_iteration(app, "rmA", sessions=sessions, redis=client, registry=registry,
                           now=t0 + 5)
    assert report.recovered == [job] and report.started == []  # deferred, not restarted
    with db.session_scope(sessions) as s:
        row = db.repository.get_job(s, job)
        assert row.maui_state is MauiJobState.DEFERRED and row.nodes_allocated == {}
        assert "not confirmed" in row.request["maui_defer"]["reason"]
    assert not client.exists(keys.token_key(job))
    # still deferred within DEFERTIME; released and started once it is over
    assert run_iteration(app, "rmA", sessions=sessions, redis=client, registry=registry,
                         now=t0 + 20).started == []
    assert run_iteration(app, "rmA", sessions=sessions, redis=client, registry=registry,
                         now=t0 + 40).started == [job]
    with db.session_scope(sessions) as s:  # a second failure is past DEFERCOUNT: held
        row = db.repository.get_job(s, job)
        row.start_time = datetime.now(timezone.utc) - timedelta(seconds=5)
    run_iteration(app, "rmA", sessions=sessions, redis=client, registry=registry, now=t0 + 45)
    with db.session_scope(sessions) as s:
        row = db.repository.get_job(s, job)
        assert row.maui_state is MauiJobState.HOLD and "batch" in row.holds
    client.close()


def test_quick_pass_starts_jobs_but_leaves_time_driven_housekeeping_to_full_iterations(
        tmp_path, settings, celery_app_factory, cleanup, monkeypatch):
    monkeypatch.setenv("GRID_TASKS_LAUNCH_TIMEOUT", "1")
    app, client, registry, sessions, _ = _grid(tmp_path, settings, celery_app_factory, "")
    lost = _submit(sessions)
    t0 = time.time()
    assert run_iteration(app, "rmA", sessions=sessions, redis=client, registry=registry,
                         now=t0).started == [lost]
    with db.session_scope(sessions) as s:  # nobody ran it: its launch is past the timeout
        db.repository.get_job(s, lost).start_time = datetime.now(timezone.utc) - timedelta(
            seconds=5)
    fresh = _submit(sessions)  # 2 processors: the other node is free
    report = run_iteration(app, "rmA", sessions=sessions, redis=client, registry=registry,
                           now=t0 + 5, quick=True)
    assert report.started == [fresh] and report.recovered == []
    with db.session_scope(sessions) as s:  # the lost launch still holds its node
        row = db.repository.get_job(s, lost)
        assert row.maui_state is MauiJobState.STARTING and row.nodes_allocated
    report = run_iteration(app, "rmA", sessions=sessions, redis=client, registry=registry,
                           now=t0 + 5.5)  # the fresh start is not past the timeout yet
    assert report.recovered == [lost]
    with db.session_scope(sessions) as s:
        row = db.repository.get_job(s, lost)
        assert row.maui_state is not MauiJobState.STARTING and row.nodes_allocated == {}
    client.close()
