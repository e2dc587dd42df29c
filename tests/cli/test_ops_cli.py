"""The Maui operator commands through the real CLI: --json parsed and asserted, tables
checked for their content, typed errors as one line with exit 1.

The database is the settings' SQLite file with the demo topology stored; rows are
inserted through grid_tasks.db.  Planning commands run with an unreachable Redis so
every node counts as up (no heartbeats in these tests); checknode and canceljob use
the private Redis.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner

from grid_tasks.celery_app import gatekeeper_queue
from grid_tasks.cli import main
from grid_tasks.db import Job, get_engine, migrate, repository, session_factory, sync_topology
from grid_tasks.node.registry import NodeRegistry
from grid_tasks.states import JobState, MauiJobState
from grid_tasks.topology import load_topology

RES = {"procs": 4, "memory_mb": 4096, "disk_mb": 1, "swap_mb": 1, "features": [],
       "attributes": {}}


@pytest.fixture
def ops(settings):
    """(env, insert): env for the CLI on the test grid; ``insert(**job fields)`` stores a job."""
    settings = settings.replace(heartbeat_ttl=30.0)
    migrate(settings.database_url)
    factory = session_factory(get_engine(settings.database_url))
    with factory() as s:
        sync_topology(s, load_topology(settings.topology_file))
        s.commit()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRID_TASKS_")}
    env.update(settings.to_env())
    now = datetime.now(timezone.utc)

    def insert(accounted: bool = False, **fields):
        fields.setdefault("maui_state", JobState(fields.get("state", "PENDING")).maui)
        with factory() as s:
            job = Job(submit_time=now - timedelta(minutes=5), **fields)
            s.add(job)
            s.flush()
            if accounted:
                repository.record_accounting(s, job)
            s.commit()
            return job.id

    yield env, insert, settings, now


def run(env, *args, ok=True):
    result = CliRunner().invoke(main, list(args), env=env, terminal_width=200)
    if ok:
        assert result.exit_code == 0, (result.output, result.stderr)
    return result


def offline(env):
    """The env with Redis out of reach: planning sees every node as up."""
    return {**env, "GRID_TASKS_REDIS_URL": "redis://127.0.0.1:1/3"}


def test_showq_sections_and_summary(ops):
    env, insert, _, now = ops
    active = insert(rm="rmA", user="ann", state=JobState.ACTIVE, tasks=4, procs=4,
                    walltime=3600, start_time=now - timedelta(minutes=1),
                    nodes_allocated={"node1": 4})
    idle = insert(rm="rmA", user="bob", state=JobState.PENDING, walltime=600)
    held = insert(rm="rmB", user="cid", state=JobState.PENDING, holds=["user"])
    data = json.loads(run(env, "showq", "--json").stdout)
    assert [r["job_id"] for r in data["active"]] == [active]
    assert [r["job_id"] for r in data["idle"]] == [idle]
    assert [(r["job_id"], r["state"]) for r in data["blocked"]] == [(held, "Hold")]
    assert data["summary"]["procs_active"] == 4 and data["summary"]["procs_total"] == 12
    table = run(env, "showq", "-r", "rmA").stdout
    assert "ACTIVE JOBS" in table and "IDLE JOBS" in table and "BLOCKED JOBS" in table
    assert "4 of 8 Processors Active (50.00%)" in table
    assert "Total Jobs: 2   Active Jobs: 1   Idle Jobs: 1   Blocked Jobs: 0" in table
    bad = run(env, "showq", "-r", "rmZ", ok=False)
    assert bad.exit_code == 1 and bad.stderr.startswith("error: unknown resource manager 'rmZ'")


def test_checkjob_explains_and_errors(ops):
    env, insert, _, _ = ops
    dep = insert(rm="rmB", state=JobState.PENDING)
    waiting = insert(rm="rmB", state=JobState.PENDING, dependencies=[dep], user="eve")
    data = json.loads(run(offline(env), "checkjob", str(waiting), "--json").stdout)
    assert data["section"] == "blocked" and data["credentials"]["user"] == "eve"
    assert data["reasons"][0]["kind"] == "dependency"
    free = json.loads(run(offline(env), "checkjob", str(dep), "--json").stdout)
    assert free["reasons"][0]["kind"] == "ready"  # rmB is empty: starts next iteration
    text = run(offline(env), "checkjob", str(waiting)).stdout
    assert f"job {waiting}" in text and "Why it does not start" in text
    missing = run(env, "checkjob", "999", ok=False)
    assert missing.exit_code == 1 and missing.stderr.strip() == "error: unknown job 999"


def test_checknode_with_live_heartbeat(ops):
    env, insert, settings, now = ops
    job = insert(rm="rmA", state=JobState.ACTIVE, tasks=2, procs=2, walltime=600,
                 start_time=now, nodes_allocated={"node2": 2}, user="ann")
    registry = NodeRegistry.from_url(settings.redis_url, settings.heartbeat_ttl)
    registry.register("rmA", "node2", RES, {"hostname": "h2"}, "configured", time.time())
    data = json.loads(run(env, "checknode", "node2", "--json").stdout)
    assert data["state"] == "Running" and data["host"] == "h2"
    assert data["configured"]["procs"] == 4 and data["available"]["procs"] == 2
    assert [j["job_id"] for j in data["jobs"]] == [job]
    assert data["last_heartbeat"] is not None
    table = run(env, "checknode", "node2").stdout
    assert "PROCS: 2" in table and "node node2 (rmA)" in table
    bad = run(env, "checknode", "node9", ok=False)
    assert bad.exit_code == 1 and "unknown node 'node9'" in bad.stderr


def test_setres_showres_releaseres(ops, celery_app_factory, in_process_worker):
    env, _, settings, _ = ops
    env = offline(env)
    # setres and releaseres are requests to the RM's gatekeeper (a worker thread here),
    # which finds Redis out of reach as well
    gatekeeper = celery_app_factory(settings.replace(redis_url=offline(env)["GRID_TASKS_REDIS_URL"]))
    in_process_worker(gatekeeper, queues=[gatekeeper_queue("rmA"), gatekeeper_queue("rmB")])
    made = json.loads(run(env, "setres", "--rm", "rmB", "-u", "alice,bob", "-d", "1:00:00",
                          "-n", "maint", "node3", "--json").stdout)
    assert made["name"] == "maint" and made["procs"] == 2 and made["acl"] == {
        "users": ["alice", "bob"]}
    assert made["iteration_triggered"] is False  # Redis out of reach: still stored
    refused = run(env, "setres", "--rm", "rmB", "-d", "30m", "node3", ok=False)
    assert refused.exit_code == 1 and "node3 has only 0 of 2 processors" in refused.stderr
    bad_time = run(env, "setres", "--rm", "rmB", "-s", "tomorrow", "node4", ok=False)
    assert bad_time.stderr.startswith("error: -s: cannot read time 'tomorrow'")
    listed = json.loads(run(env, "showres", "-r", "rmB", "--json").stdout)
    assert [(r["name"], r["procs"], r["state"]) for r in listed] == [("maint", 2, "Active")]
    assert "maint" in run(env, "showres", "-n").stdout
    start = json.loads(run(env, "showstart", "-r", "rmB", "4@10:00", "--json").stdout)
    assert start["estimates"][0]["start_in"] >= 3590  # node3 is held for the hour
    assert json.loads(run(env, "releaseres", "maint", "--json").stdout)[0]["name"] == "maint"
    assert json.loads(run(env, "showres", "--json").stdout) == []
    gone = run(env, "releaseres", "maint", ok=False)
    assert gone.exit_code == 1 and "unknown reservation 'maint'" in gone.stderr


def test_showstart_and_showbf(ops):
    env, insert, _, now = ops
    env = offline(env)
    insert(rm="rmB", state=JobState.ACTIVE, tasks=2, procs=2, walltime=1200,
           start_time=now, nodes_allocated={"node3": 2}, user="ann")
    free = json.loads(run(env, "showstart", "-r", "rmB", "2@10:00", "--json").stdout)
    assert free["estimates"][0]["allocation"] == {"node4": 2}
    assert free["estimates"][0]["start_in"] <= 1
    later = json.loads(run(env, "showstart", "-r", "rmB", "4@10:00", "--json").stdout)
    assert 1100 < later["estimates"][0]["start_in"] <= 1200
    windows = json.loads(run(env, "showbf", "-r", "rmB", "--json").stdout)
    assert windows == {"rmB": [{"procs": 2, "nodes": 1, "duration": "INFINITY"}]}
    text = run(env, "showbf", "-r", "rmB").stdout
    assert "2 procs on 1 node available with no timelimit" in text
    bad = run(env, "showbf", "-d", "soon", ok=False)
    assert bad.stderr.startswith("error: -d: cannot read duration 'soon'")
    # without -r a request is asked of every RM (broker, issue 8): offline, a clear error
    bad = run(env, "showstart", "2@1:00", ok=False)
    assert bad.stderr.startswith("error: cannot reach Redis")


def test_showstats_and_diagnose(ops):
    env, insert, _, now = ops
    env = offline(env)
    for user, procs in (("alice", 2), ("bob", 1)):
        insert(accounted=True, rm="rmB", user=user, state=JobState.DONE, tasks=procs,
               procs=procs, walltime=600, start_time=now - timedelta(minutes=4),
               end_time=now - timedelta(minutes=2), exit_code=0,
               maui_state=MauiJobState.COMPLETED)
    stats = json.loads(run(env, "showstats", "-u", "--json").stdout)
    assert stats["total"]["jobs"] == 2
    rows = {r["key"]: r for r in stats["rows"]}
    assert rows["alice"]["proc_hours"] == pytest.approx(2 * 120 / 3600, abs=1e-3)
    assert rows["alice"]["fairshare_percent"] == pytest.approx(200 / 3, abs=0.1)
    assert "alice" in run(env, "showstats", "-u").stdout
    idle = insert(rm="rmB", state=JobState.PENDING, user="carol", walltime=600)
    prio = json.loads(run(env, "diagnose", "-p", "-r", "rmB", "--json").stdout)
    assert [r["job_id"] for r in prio["rmB"]] == [idle] and prio["rmB"][0]["components"]
    why = json.loads(run(env, "diagnose", "-j", str(idle), "--json").stdout)
    assert why[0]["job_id"] == idle and why[0]["reasons"][0]["kind"] == "ready"
    both = run(env, "diagnose", ok=False)
    assert both.exit_code == 1 and "exactly one of -p" in both.stderr


def test_canceljob_through_the_grid_api(ops, celery_app_factory, in_process_worker):
    env, insert, settings, _ = ops
    # the cancel is a request to rmA's gatekeeper (here a worker thread on gram.rmA)
    in_process_worker(celery_app_factory(settings), queues=[gatekeeper_queue("rmA")])
    idle = insert(rm="rmA", state=JobState.PENDING, user="ann")
    done = insert(rm="rmA", state=JobState.DONE, user="ann")
    refused = run(env, "canceljob", str(idle), str(done), ok=False)
    assert refused.exit_code == 1
    assert refused.stderr.strip() == f"error: job {done} already finished (DONE); nothing was cancelled"
    assert json.loads(run(env, "checkjob", str(idle), "--no-plan", "--json").stdout)[
        "gram_state"] == "PENDING"  # nothing disturbed
    out = json.loads(run(env, "canceljob", str(idle), "--json").stdout)
    assert out == [{"job_id": idle, "previous_state": "PENDING", "state": "FAILED",
                    "settled": True}]
    after = json.loads(run(env, "checkjob", str(idle), "--json").stdout)
    assert after["gram_state"] == "FAILED" and after["gram_error"] == "USER_CANCELLED"
    assert after["history"][-1]["to"] == "FAILED"
    assert run(env, "canceljob", "4242", ok=False).stderr.strip() == "error: unknown job 4242"
