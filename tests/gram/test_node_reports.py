"""A gatekeeper records a node's report only as far as its own records vouch for it.

The attack: a compromised node (it holds the node key) rewrites a job it never ran.
Every message here is pushed raw into ``gram.rmA`` (as an attacker with broker access
would) before a real ``grid-tasks worker --rm rmA`` gatekeeper with signing on starts;
the test then waits until it has consumed and acknowledged them all.
"""

from __future__ import annotations

import datetime as dt
import os
import time

import pytest
import redis

from grid_tasks import db
from grid_tasks.effects import RECORD_REPORTS
from grid_tasks.embedded.stack import grid_tasks_command, prepare_database
from grid_tasks.embedded.supervisor import Supervisor, leftover
from grid_tasks.gram.report_sender import FINISHED, STARTED
from grid_tasks.security.refusals import counts
from grid_tasks.security.role_keys import ensure_grid_keys, init_role_key
from grid_tasks.security.roles import Role
from grid_tasks.selftest.forge import push, sealed, task_body
from grid_tasks.states import JobState
from grid_tasks.topology import load_topology

QUEUE = "gram.rmA"


def _job(sessions, nodes: dict[str, int], token: str) -> int:
    """A job of rmA stored as launched on ``nodes`` under ``token``."""
    from grid_tasks.gram.records import Outbox
    from grid_tasks.gram.submission import build_job
    from grid_tasks.rsl import lower

    rsl = "&(executable=/bin/true)"
    with db.session_scope(sessions) as session:
        row = build_job(session, "rmA", rsl, lower(rsl)[0], {"user": "u"},
                        dt.datetime.now(dt.timezone.utc), Outbox())
        row.nodes_allocated, row.launch_token = nodes, token
        session.flush()
        return row.id


def _report(job: int, token: str, node: str = "node1", kind: str = FINISHED,
            code: int = 0) -> dict:
    results = {node: {"exit_codes": {"0": code}, "reason": None, "code": None}}
    return {"kind": kind, "job": job, "rm": "rmA", "node": node, "token": token,
            "results": results if kind == FINISHED else {}, "started": None}


def _body(reports: list[dict], node: str = "node1") -> list:
    return task_body(RECORD_REPORTS, {"rm": "rmA", "node": node, "reports": reports})


def _snapshot(sessions, job: int) -> tuple:
    with db.session_scope(sessions) as session:
        row = db.repository.get_job(session, job)
        return (row.state, row.version, row.exit_code, row.end_time,
                len(db.repository.job_history(session, job)))


def _drained(settings, timeout: float = 60) -> None:
    """Wait until the gatekeeper consumed and acknowledged every message of ``gram.rmA``."""
    broker = redis.Redis.from_url(settings.broker_url)
    try:
        deadline = time.monotonic() + timeout
        while broker.llen(QUEUE) or broker.hlen("unacked"):
            assert time.monotonic() < deadline, "the gatekeeper did not drain gram.rmA"
            time.sleep(0.1)
    finally:
        broker.close()


@pytest.fixture
def signed_grid(quiet_settings, tmp_path):
    """(settings, keys, sessions, start): a prepared database and a function starting the
    signing gatekeeper of rmA (scheduler key)."""
    settings = quiet_settings
    prepare_database(settings, load_topology(settings.topology_file))
    keys = ensure_grid_keys(tmp_path / "keys", "alice", now=dt.datetime.now(dt.timezone.utc))
    supervisor = Supervisor(tmp_path / "logs")

    def start() -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GRID_TASKS_")}
        env.update(settings.replace(signing=keys.signing(Role.SCHEDULER)).to_env())
        supervisor.spawn("gatekeeper", grid_tasks_command(
            "worker", "--rm", "rmA", "--no-check", "-l", "WARNING"), env=env)

    sessions = db.session_factory(db.get_engine(settings.database_url))
    try:
        yield settings, keys, sessions, start
    finally:
        pids = supervisor.all_pids()
        supervisor.stop_all(timeout=10)
        db.dispose_engines()
    assert leftover(pids) == []


def test_forged_and_foreign_reports_are_refused_and_change_nothing(signed_grid, tmp_path):
    settings, keys, sessions, start = signed_grid
    mine = _job(sessions, {"node1": 1}, "tok-mine")
    other = _job(sessions, {"node2": 1}, "tok-other")  # launched on node2 only
    before = _snapshot(sessions, other)
    node2_key = init_role_key(tmp_path / "keys", Role.NODE, "node2", now=dt.datetime.now(
        dt.timezone.utc), stem="node-node2")
    node_signed = lambda body: sealed(keys.node, body)  # noqa: E731 - the shared node key
    pushes = [
        # node1 ends a job launched on node2 only (it guessed the token, even)
        node_signed(_body([_report(other, "tok-other")])),
        # node1 claims to be node2, with a token it does not have
        node_signed(_body([_report(other, "guessed", node="node2")], node="node2")),
        # a key naming node2 speaks for node1's job
        sealed(node2_key, _body([_report(mine, "tok-mine")])),
        # a user signs a perfectly good report: not a node
        sealed(keys.user, _body([_report(mine, "tok-mine", code=9)])),
    ]
    # the control, sent twice (a redelivery): started, then finished with code 3
    good = node_signed(_body([_report(mine, "tok-mine", kind=STARTED),
                              _report(mine, "tok-mine", code=3)]))
    for body in (*pushes, good, good):
        push(settings.broker_url, QUEUE, RECORD_REPORTS, body, signed=True)
    start()
    _drained(settings)

    assert _snapshot(sessions, other) == before  # nothing of the job it never ran
    state, _, code, _, entries = _snapshot(sessions, mine)
    assert (state, code, entries) == (JobState.DONE, 3, 3)  # PENDING, ACTIVE, DONE: once
    with db.session_scope(sessions) as session:
        assert session.query(db.AccountingRecord).filter_by(job_id=mine).count() == 1
    store = redis.Redis.from_url(settings.redis_url)
    try:
        assert counts(store) == {"bad_report": 3, "role": 1}
        assert counts(store, QUEUE) == {"bad_report": 3, "role": 1}  # all were QUEUE's
        assert counts(store, "node.rmA.node1") == {}
    finally:
        store.close()
