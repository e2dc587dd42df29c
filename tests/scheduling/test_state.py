"""load_scheduler over real SQL state (SQLite), and the policies read for live scheduling."""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta, timezone

import pytest

from grid_tasks import db
from grid_tasks.embedded.stack import prepare_database
from grid_tasks.errors import ConfigError, NotFoundError
from grid_tasks.gram.records import Outbox
from grid_tasks.gram.submission import build_job
from grid_tasks.rsl import lower
from grid_tasks.scheduling.recovery import NodeFailurePolicy, node_failure_policy
from grid_tasks.scheduling.state import load_scheduler
from grid_tasks.scheduling.tasks import poll_interval
from grid_tasks.states import JobState, MauiJobState, NodeState
from grid_tasks.topology import load_topology


@pytest.fixture
def sessions(settings):
    prepare_database(settings, load_topology(settings.topology_file))
    yield db.session_factory(db.get_engine(settings.database_url))
    db.dispose_engines(settings.database_url)


def _job(session, rsl, user="u", now=None):
    now = now or datetime.now(timezone.utc)
    return build_job(session, "rmA", rsl, lower(rsl)[0], {"user": user}, now, Outbox())


def test_idle_running_and_reserved_state_is_loaded(sessions):
    now = datetime.now(timezone.utc)
    with db.session_scope(sessions) as s:
        running = _job(s, "&(executable=/bin/true)(count=4)(maxWallTime=10)")
        db.record_transition(s, running, JobState.ACTIVE, "started", now)
        running.nodes_allocated = {"node1": 4}
        idle = _job(s, "&(executable=/bin/true)(count=2)", user="bob")
        s.add(db.Reservation(name="r1", rm="rmA", kind=db.ReservationKind.ADMIN,
                             acl={"users": ["alice"]}, nodes=["node2"],
                             start_time=now - timedelta(minutes=1),
                             end_time=now + timedelta(hours=1)))
        ids = running.id, idle.id
    with db.session_scope(sessions) as s:
        sched = load_scheduler(s, "rmA", now=time.time())
        assert set(sched.running_jobs()) == {str(ids[0])}
        assert [j.id for j in sched.idle_jobs()] == [str(ids[1])]
        assert [r.name for r in sched.reservations() if r.name == "r1"] == ["r1"]
        # node1 is full and node2 reserved for alice: bob's job cannot start now
        assert sched.iterate(time.time()).started == []


def _reserve_for_alice(session, name):
    """An admin reservation of rmA's two nodes for alice, begun a minute ago."""
    now = datetime.now(timezone.utc)
    session.add(db.Reservation(name=name, rm="rmA", kind=db.ReservationKind.ADMIN,
                               acl={"users": ["alice"]}, nodes=["node1", "node2"],
                               start_time=now - timedelta(minutes=1),
                               end_time=now + timedelta(hours=1)))


def test_admitted_user_starts_inside_the_reservation(sessions):
    with db.session_scope(sessions) as s:
        _reserve_for_alice(s, "r1")
        alice = _job(s, "&(executable=/bin/true)(count=2)", user="alice").id
        _job(s, "&(executable=/bin/true)", user="bob")
    with db.session_scope(sessions) as s:
        started = load_scheduler(s, "rmA", now=time.time()).iterate(time.time()).started
    assert [st.job_id for st in started] == [str(alice)]


def test_silent_nodes_get_no_work_and_unknown_rm_is_refused(sessions, settings):
    from grid_tasks.node.registry import NodeRegistry

    registry = NodeRegistry.from_url(settings.redis_url, 30)
    registry.register("rmA", "node2", {}, {}, "test", time.time())  # node1 never heard of
    with db.session_scope(sessions) as s:
        _job(s, "&(executable=/bin/true)(count=3)")
    with db.session_scope(sessions) as s:
        sched = load_scheduler(s, "rmA", now=time.time(), registry=registry)
        assert sched.engine.nodes["node1"].state is NodeState.UNKNOWN
        (start,) = sched.iterate(time.time()).started
        assert dict(start.allocation) == {"node2": 3}
        with pytest.raises(NotFoundError, match="rmZ"):
            load_scheduler(s, "rmZ", now=time.time())


def test_starting_jobs_hold_their_nodes(sessions):
    with db.session_scope(sessions) as s:
        first = _job(s, "&(executable=/bin/true)(count=8)")
        first.maui_state = MauiJobState.STARTING
        first.nodes_allocated = {"node1": 4, "node2": 4}
        first.start_time = datetime.now(timezone.utc)
        _job(s, "&(executable=/bin/true)")
    with db.session_scope(sessions) as s:
        assert load_scheduler(s, "rmA", now=time.time()).iterate(time.time()).started == []


def test_node_failure_policy_from_environment_or_maui_cfg(tmp_path):
    cfg = tmp_path / "maui.cfg"
    cfg.write_text("RMPOLLINTERVAL 00:00:07\nJOBACTIONONNODEFAILURE requeue\n")
    assert node_failure_policy(None, environ={}) is NodeFailurePolicy.FAIL
    assert node_failure_policy(str(cfg), environ={}) is NodeFailurePolicy.REQUEUE
    env = {"GRID_TASKS_NODE_FAILURE_POLICY": "fail"}
    assert node_failure_policy(str(cfg), environ=env) is NodeFailurePolicy.FAIL
    with pytest.raises(ConfigError, match="FAIL or REQUEUE"):
        node_failure_policy(None, environ={"GRID_TASKS_NODE_FAILURE_POLICY": "panic"})
    assert poll_interval(cfg) == 7.0
    assert poll_interval(None) == 30.0


def test_node_failure_policy_follows_an_edited_maui_cfg(tmp_path):
    """Read once per version of the file (every iteration asks), yet an edit counts at once."""
    cfg = tmp_path / "maui.cfg"
    cfg.write_text("JOBACTIONONNODEFAILURE requeue\n")
    assert node_failure_policy(str(cfg), environ={}) is NodeFailurePolicy.REQUEUE
    cfg.write_text("JOBACTIONONNODEFAILURE fail   \n")
    assert node_failure_policy(str(cfg), environ={}) is NodeFailurePolicy.FAIL
    cfg.write_text("JOBACTIONONNODEFAILURE requeue\n")  # same size as before: the time counts
    os.utime(cfg, ns=(1, 1))
    assert node_failure_policy(str(cfg), environ={}) is NodeFailurePolicy.REQUEUE
    cfg.unlink()
    assert node_failure_policy(str(cfg), environ={}) is NodeFailurePolicy.FAIL


def test_beat_runs_each_rm_every_rmpollinterval_of_its_own_maui_cfg(tmp_path, celery_app_factory,
                                                                   settings):
    from types import SimpleNamespace

    from grid_tasks.effects import ITERATE
    from grid_tasks.scheduling.tasks import _per_rm_schedule

    (tmp_path / "fast.cfg").write_text("RMPOLLINTERVAL 00:00:05\n")
    (tmp_path / "slow.cfg").write_text("RMPOLLINTERVAL 00:02:00\n")
    topo = tmp_path / "grid.toml"
    topo.write_text('[rm.fast]\npolicy_file = "fast.cfg"\n[rm.fast.node.n1]\nprocs = 1\n'
                    '[rm.slow]\npolicy_file = "slow.cfg"\n[rm.slow.node.n2]\nprocs = 1\n')
    app = celery_app_factory(settings.replace(topology_file=topo))
    entries: dict = {}
    beat = SimpleNamespace(app=app, scheduler=SimpleNamespace(update_from_dict=entries.update))
    _per_rm_schedule(sender=beat)
    assert entries[f"{ITERATE}[fast]"]["schedule"] == 5.0
    assert entries[f"{ITERATE}[slow]"]["schedule"] == 120.0
    assert entries[f"{ITERATE}[slow]"]["kwargs"] == {"rm": "slow"}
    assert entries[f"{ITERATE}[fast]"]["options"]["shadow"] == "iterate on fast"
    from grid_tasks.scheduling.tasks import WATCH_NODES  # silent nodes noticed every TTL

    assert entries[f"{WATCH_NODES}[slow]"]["schedule"] == settings.heartbeat_ttl
    assert entries[f"{WATCH_NODES}[slow]"]["kwargs"] == {"rm": "slow"}


def test_jobactiononnodefailure_is_a_known_maui_cfg_parameter():
    from grid_tasks.maui.cfg import parse_maui_config
    from grid_tasks.maui.cfg import MauiConfigError

    cfg = parse_maui_config("JOBACTIONONNODEFAILURE requeue\n", "maui.cfg")
    assert cfg.get("JOBACTIONONNODEFAILURE") == "REQUEUE"
    assert not cfg.warnings
    assert parse_maui_config("", "maui.cfg").get("JOBACTIONONNODEFAILURE") == "FAIL"
    with pytest.raises(MauiConfigError) as info:
        parse_maui_config("RMPOLLINTERVAL 10\nJOBACTIONONNODEFAILURE panic\n", "maui.cfg")
    assert info.value.line == 2


@pytest.mark.parametrize("seed", range(16))
def test_a_full_machines_idle_queue_is_unread_and_decisions_are_the_same(sessions, seed):
    """idle_if_free (the live iteration's loader): the same starts as reading the whole
    queue, for random mixes of running and idle jobs and a reservation for u0 on node2;
    no idle job read when rmA (node1 and node2, 4 processors each) has none free."""
    import random

    rng = random.Random(seed)
    now = datetime.now(timezone.utc)
    with db.session_scope(sessions) as s:
        if rng.random() < 0.5:
            s.add(db.Reservation(name="lab", rm="rmA", kind=db.ReservationKind.ADMIN,
                                 acl={"users": ["u0"]}, nodes=["node2"],
                                 start_time=now - timedelta(minutes=1),
                                 end_time=now + timedelta(hours=1)))
        for node in ("node1", "node2"):
            left = rng.choice([0, 1, 2, 4, 4, 4])
            while left:
                size = rng.randint(1, left)
                left -= size
                row = _job(s, f"&(executable=/bin/true)(count={size})(maxWallTime=60)",
                           user=rng.choice(["u0", "u1"]))
                db.record_transition(s, row, JobState.ACTIVE, "started", now)
                row.nodes_allocated = {node: size}
        for i in range(rng.randint(1, 6)):
            _job(s, f"&(executable=/bin/true)(count={rng.randint(1, 5)})", user=f"u{i % 3}")
    decided = []
    for lazy in (False, True):
        with db.session_scope(sessions) as s:
            sched = load_scheduler(s, "rmA", now=time.time(), idle_if_free=lazy)
            full = sched.nothing_free(time.time())
            if lazy and full:
                assert sched.idle_jobs() == []
            else:
                assert sched.idle_jobs() != []
            decided.append(sorted(st.job_id for st in sched.iterate(time.time()).started))
    assert decided[0] == decided[1]
    if full:
        assert decided[1] == []


@pytest.mark.parametrize("lazy", [False, True])
def test_a_reservation_made_before_a_job_is_never_missed_with_that_job(sessions, lazy):
    """Another client commits a reservation for alice, then bob's job, while an iteration
    is loading (right after it read the reservations): the iteration may miss both, never
    the reservation alone, so bob never starts on the reserved nodes (CI saw it did)."""
    from sqlalchemy import event

    engine = db.get_engine(sessions.kw["bind"].url)
    made: list[int] = []

    def make_both(conn, cursor, statement, *_):
        if made or "FROM reservations" not in statement:
            return
        with db.session_scope(sessions) as other:
            _reserve_for_alice(other, "maint")
        with db.session_scope(sessions) as other:
            made.append(_job(other, "&(executable=/bin/true)", user="bob").id)

    event.listen(engine, "after_cursor_execute", make_both)
    try:
        with db.session_scope(sessions) as s:
            sched = load_scheduler(s, "rmA", now=time.time(), idle_if_free=lazy)
            assert made  # committed mid-load
            started = sched.iterate(time.time()).started
    finally:
        event.remove(engine, "after_cursor_execute", make_both)
    assert started == [] and [j.id for j in sched.idle_jobs()] in ([], [str(made[0])])
    with db.session_scope(sessions) as s:  # the next iteration sees both: bob waits
        sched = load_scheduler(s, "rmA", now=time.time(), idle_if_free=lazy)
        assert sched.iterate(time.time()).started == []
        assert [j.id for j in sched.idle_jobs()] == [str(made[0])]
