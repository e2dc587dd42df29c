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
from grid_tasks.maui.modules import MODULES, SchedModule, register_module
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


class _Witness(SchedModule):
    """Records, across the per-iteration instances, what the shell hands its modules."""

    calls: list = []

    def on_start(self, scheduler):
        self.calls.append(("start", None))

    def on_iteration(self, scheduler, result):
        self.calls.append(("iteration", [int(s.job_id) for s in result.started]))


def test_the_live_shell_calls_modules_once_per_iteration_with_the_cores_result(
        tmp_path, settings, celery_app_factory, cleanup):
    register_module("witness-test")(_Witness)
    _Witness.calls = []
    try:
        app, client, registry, sessions, settings = _grid(
            tmp_path, settings, celery_app_factory, "MODULES witness-test\n")
        first = _submit(sessions)
        report = run_iteration(app, "rmA", sessions=sessions, redis=client, registry=registry)
        second = _submit(sessions)
        later = run_iteration(app, "rmA", sessions=sessions, redis=client, registry=registry)
        assert (report.started, later.started) == ([first], [second])
        assert _Witness.calls == [("start", None), ("iteration", [first]),
                                  ("start", None), ("iteration", [second])]
        client.close()
    finally:
        MODULES.pop("witness-test", None)


def test_unconfirmed_launch_is_fenced_and_idle_at_its_deadline_without_deferral(
        tmp_path, settings, celery_app_factory, cleanup, monkeypatch):
    """Finding 2 at the scheduler: an unconfirmed launch is fenced, not deleted; its
    node stays held and the job is not relaunched before the fence deadline; then it
    is Idle again with no deferral (a lost node is not the job's fault)."""
    from grid_tasks.db.models import Fence
    from grid_tasks.leases import fence_span

    monkeypatch.setenv("GRID_TASKS_LAUNCH_TIMEOUT", "1")
    app, client, registry, sessions, settings = _grid(
        tmp_path, settings, celery_app_factory, "DEFERTIME 01:00:00\nDEFERCOUNT 1\n")
    span = fence_span(settings)
    job = _submit(sessions)
    t0 = time.time()
    assert run_iteration(app, "rmA", sessions=sessions, redis=client, registry=registry,
                         now=t0).started == [job]
    with db.session_scope(sessions) as s:  # nobody ran it: no lease, no part reported
        row = db.repository.get_job(s, job)
        row.start_time, token = datetime.now(timezone.utc) - timedelta(seconds=5), row.launch_token
        (node,) = row.nodes_allocated
    report = run_iteration(app, "rmA", sessions=sessions, redis=client, registry=registry,
                           now=t0 + 5)
    assert report.recovered == [job] and report.started == []
    assert report.due_at == pytest.approx(t0 + 5 + span)  # an iteration is sent for then
    assert client.get(keys.token_key(job)).decode() == keys.fenced(token)  # not deleted
    with db.session_scope(sessions) as s:
        row = db.repository.get_job(s, job)
        assert row.maui_state is MauiJobState.HOLD and row.holds == ["fence"]
        assert row.nodes_allocated == {} and "maui_defer" not in row.request
        (held,) = s.query(Fence).all()
        assert held.nodes == {node: 2} and held.token == token
    # two fresh jobs of 2 processors: one fits on the other node, none on the fenced one
    fresh = [_submit(sessions), _submit(sessions)]
    assert run_iteration(app, "rmA", sessions=sessions, redis=client, registry=registry,
                         now=t0 + 6).started == [fresh[0]]
    assert run_iteration(app, "rmA", sessions=sessions, redis=client, registry=registry,
                         now=t0 + 5 + span - 0.5).started == []
    # past the deadline: the fence is gone, the job is Idle and starts first (older)
    report = run_iteration(app, "rmA", sessions=sessions, redis=client, registry=registry,
                           now=t0 + 5 + span + 0.5)
    assert report.released == [job] and report.started == [job]
    with db.session_scope(sessions) as s:
        assert s.query(Fence).filter_by(job_id=job).count() == 0  # fresh[0] has its own
        assert db.repository.get_job(s, job).holds == []
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
