"""showq and showstart at depth through the real CLI: a page in the table, every job
in --json and --all, and showstart's kept plan in the grid's (private) Redis reused
until the RM changes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import pytest
import redis
from click.testing import CliRunner
from sqlalchemy import insert

from grid_tasks.cli import main
from grid_tasks.db import Job, get_engine, migrate, session_factory, sync_topology
from grid_tasks.node.registry import NodeRegistry
from grid_tasks.ops.plan_cache import PlanCache, PlanDigest
from grid_tasks.states import JobState, MauiJobState
from grid_tasks.topology import load_topology

RES = {"procs": 2, "memory_mb": 2048, "disk_mb": 1, "swap_mb": 1, "features": [],
       "attributes": {}}


@pytest.fixture
def deep(settings):
    """(env, ids, settings): 130 idle jobs on rmB in one insert; rmB's nodes alive."""
    settings = settings.replace(heartbeat_ttl=60.0)
    migrate(settings.database_url)
    engine = get_engine(settings.database_url)
    with session_factory(engine)() as s:
        sync_topology(s, load_topology(settings.topology_file))
        s.commit()
    now = datetime.now(timezone.utc)
    rows = [{"rm": "rmB", "user_name": f"u{i % 3}", "state": JobState.PENDING,
             "maui_state": MauiJobState.IDLE, "tasks": 1 + i % 2, "procs": 1 + i % 2,
             "walltime": 600, "version": 1, "request": {}, "holds": [], "dependencies": [],
             "nodes_allocated": {}, "submit_time": now - timedelta(seconds=500 - i)}
            for i in range(130)]
    with engine.begin() as conn:
        conn.execute(insert(Job.__table__), rows)
    registry = NodeRegistry.from_url(settings.redis_url, settings.heartbeat_ttl)
    for node in ("node3", "node4"):
        registry.register("rmB", node, RES, {"hostname": node}, "configured", time.time())
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRID_TASKS_")}
    env.update(settings.to_env())
    with session_factory(engine)() as s:
        ids = [j.id for j in s.query(Job).order_by(Job.id)]
    yield env, ids, settings
    registry.client.close()


def listed(text: str) -> list[int]:
    """The job ids of a showq table's Idle lines, in order."""
    rows = [line.replace("│", " ").split() for line in text.splitlines()]
    return [int(r[0]) for r in rows if len(r) > 3 and r[0].isdigit() and r[2] == "Idle"]


def run(env, *args):
    result = CliRunner().invoke(main, list(args), env=env, terminal_width=200)
    assert result.exit_code == 0, (result.output, result.stderr)
    return result.stdout


def test_showq_pages_and_lists_everything_on_request(deep):
    env, ids, _ = deep
    data = json.loads(run(env, "showq", "--json"))
    assert sorted(r["job_id"] for r in data["idle"]) == ids and "page" not in data
    assert data["summary"]["idle_jobs"] == 130
    table = run(env, "showq", "-r", "rmB", "--limit", "50")
    assert "rows 1-50 of 130 idle jobs (--page 2 for the next, --all for every row)" in table
    assert "Total Jobs: 130   Active Jobs: 0   Idle Jobs: 130   Blocked Jobs: 0" in table
    page3 = run(env, "showq", "-r", "rmB", "--limit", "50", "--page", "3")
    assert "rows 101-130 of 130 idle jobs (--all for every row)" in page3
    order = [r["job_id"] for r in data["idle"]]
    assert listed(page3) == order[100:]
    assert listed(run(env, "showq", "-r", "rmB", "--all")) == order


def test_showstart_reuses_the_kept_plan_until_the_rm_changes(deep):
    env, ids, settings = deep
    client = redis.Redis.from_url(settings.redis_url)
    key = PlanCache(client, settings.database_url).key("rmB")
    first = json.loads(run(env, "showstart", str(ids[-1]), "--json"))
    made = PlanDigest.from_bytes(client.get(key)).made
    again = json.loads(run(env, "showstart", str(ids[-1]), "--json"))
    assert PlanDigest.from_bytes(client.get(key)).made == made  # reused, not made anew
    assert [e["allocation"] for e in again["estimates"]] == \
        [e["allocation"] for e in first["estimates"]]
    with session_factory(get_engine(settings.database_url))() as s:
        s.get(Job, ids[0]).holds = ["user"]  # the RM changed: its next plan is made anew
        s.commit()
    time.sleep(0.01)
    run(env, "showstart", str(ids[-1]), "--json")
    assert PlanDigest.from_bytes(client.get(key)).made > made
    client.close()


#: What ``showstart JOB`` of a native RM never needs: the RSL parser (an RSL request's),
#: the MIL compiler (the broker's collection), the Slurm client (a Slurm RM's), Alembic,
#: Celery and kombu (the commands that send).
NOT_FOR_SHOWSTART = ("grid_tasks.rsl", "grid_tasks.mil", "grid_tasks.slurm", "alembic",
                     "celery", "kombu")
SHOWSTART = ("import json, sys\nfrom grid_tasks.cli import main\n"
             "try:\n    main(sys.argv[1:], prog_name='grid-tasks')\n"
             "finally:\n    print(json.dumps([m for m in %r if m in sys.modules]), "
             "file=sys.stderr)\n" % (NOT_FOR_SHOWSTART,))


def test_showstart_of_a_job_loads_neither_rsl_mil_slurm_nor_celery(deep):
    env, ids, _ = deep
    for _ in range(2):  # the plan made, then the kept one replayed
        done = subprocess.run([sys.executable, "-c", SHOWSTART, "showstart", str(ids[-1])],
                              env=env, capture_output=True, text=True, timeout=120,
                              check=False)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stderr.strip().splitlines()[-1]) == []
