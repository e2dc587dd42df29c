"""The scale harness: one ``grid-tasks worker --harness`` process serving many node
identities over the real protocol.

Real processes throughout: a private Redis, a ``grid-tasks worker --scheduler
--gatekeepers`` (the gatekeeper that records registrations and reports, and the
iteration), and harness processes on a topology of 20 nodes in one table
(``h[01-20]``).  Each identity must register (Redis and SQL) and heartbeat; a job
submitted to the RM lands on one of them and reaches DONE through the stand-in and
through the real job manager; a launch not signed by a scheduler is refused; killing
the harness turns every identity Unknown.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import time

import pytest

from grid_tasks.embedded.supervisor import Child, Supervisor, leftover
from grid_tasks.gram.tasks import LAUNCH
from grid_tasks.node.harness import (
    ENV_HARNESS,
    HarnessError,
    HarnessSpec,
    JobsMode,
    format_identities,
    parse_identities,
)
from grid_tasks.node.registry import NodeRegistry
from grid_tasks.security.role_keys import ensure_grid_keys
from grid_tasks.security.roles import Role
from grid_tasks.selftest.forge import launch_body, push, sealed
from grid_tasks.states import JobState, NodeState
from tests.conftest import CONFIG_DIR, _grid_tasks_command
from tests.waiting import until

RM = "rmH"
NODES = [f"h{i:02d}" for i in range(1, 21)]


def test_identities_round_trip_through_their_compact_form():
    ids = [(RM, n) for n in NODES] + [("rmB", "node3"), ("rmB", "x7")]
    text = format_identities(ids)
    assert text == "rmH:h[01-20];rmB:node3,x7"
    assert parse_identities(text) == ids
    spec = HarnessSpec.from_env({ENV_HARNESS: text, "GRID_TASKS_HARNESS_JOBS": "standin"})
    assert spec.jobs is JobsMode.STANDIN and spec.rms() == [RM, "rmB"]
    assert HarnessSpec.from_env({}) is None


@pytest.mark.parametrize("text,why", [("h[01-03]", "RM:NODES"), ("rmH:", "RM:NODES"),
                                      ("rmH:h1;rmH:h1", "named twice"),
                                      ("rmH:h[3-1]", "backwards")])
def test_malformed_identities_are_refused_saying_why(text, why):
    with pytest.raises(HarnessError if why != "backwards" else Exception, match=why):
        parse_identities(text)


def test_an_unknown_jobs_mode_is_refused():
    with pytest.raises(HarnessError, match="GRID_TASKS_HARNESS_JOBS"):
        HarnessSpec.from_env({ENV_HARNESS: "rmH:h01", "GRID_TASKS_HARNESS_JOBS": "fake"})


# --- live -------------------------------------------------------------------------


@pytest.fixture
def harness_settings(settings, tmp_path):
    """Settings on a topology of one RM with 20 nodes written as one range."""
    topo = tmp_path / "harness-grid.toml"
    topo.write_text(f'[rm.{RM}]\npolicy_file = "{CONFIG_DIR / "demo.cfg"}"\n\n'
                    f'[rm.{RM}.node."h[01-20]"]\nprocs = 2\nmemory_mb = 1024\n')
    return settings.replace(topology_file=topo)


@pytest.fixture
def processes(harness_settings, tmp_path):
    """``start(name, *args, node=False, **env) -> Child``: ``grid-tasks worker ARGS``
    on the harness settings (a node-side one without database credentials)."""
    supervisor = Supervisor(tmp_path / "logs")
    base = {k: v for k, v in os.environ.items() if not k.startswith("GRID_TASKS_")}
    base.update(harness_settings.to_env(), PYTHONUNBUFFERED="1")

    def start(name: str, *args: str, node: bool = False, **extra: str) -> Child:
        env = {**base, **extra}
        if node:
            env.pop("GRID_TASKS_DATABASE_URL", None)
        return supervisor.spawn(name, _grid_tasks_command("worker", *args, "-l", "WARNING",
                                                          "--no-check"), env=env)

    yield start
    pids = supervisor.all_pids()
    supervisor.stop_all(timeout=10)
    assert leftover(pids) == [], "worker processes survived teardown"


def _prepared(settings) -> None:
    from grid_tasks.embedded.stack import prepare_database
    from grid_tasks.topology import load_topology

    assert prepare_database(settings, load_topology(settings.topology_file))


def _harness(processes, jobs: str, nodes: str = "h[01-20]", **env: str) -> Child:
    return processes(f"harness-{jobs}", "--harness", "--rm", RM, "--nodes", nodes,
                     "--jobs", jobs, node=True, **env)


def _alive(registry: NodeRegistry, child: Child, names: list[str]) -> None:
    try:
        registry.wait_alive([(RM, n) for n in names], timeout=30)
    except Exception:
        raise AssertionError(f"harness identities did not register:\n{child.log_tail(30)}")


def _job_outcome(settings, job_id: int):
    from grid_tasks import db

    sessions = db.session_factory(db.get_engine(settings.database_url))

    def ended():
        with db.session_scope(sessions) as session:
            row = db.repository.get_job(session, job_id)
            return row.state.terminal and (row.state, row.exit_code,
                                           [h.to_state for h in row.history],
                                           dict(row.nodes_allocated or {}))

    return until(ended, 60, f"job {job_id} to end")


def _recorded_nodes(settings) -> set[str]:
    from sqlalchemy import select

    from grid_tasks import db
    from grid_tasks.db.models.resources import Node

    sessions = db.session_factory(db.get_engine(settings.database_url))
    with db.session_scope(sessions) as session:
        return set(session.scalars(select(Node.name).where(
            Node.rm == RM, Node.last_seen.is_not(None))))


def _node_check(settings, node: str) -> dict:
    from grid_tasks.celery_app import create_app
    from grid_tasks.node.tasks import NODE_CHECK, check_options

    app = create_app(settings)
    try:
        return app.send_task(NODE_CHECK, **check_options(RM, node)).get(timeout=30)
    finally:
        app.close()


def test_identities_register_beat_run_a_job_through_the_stand_in_and_go_unknown(
        harness_settings, processes):
    from grid_tasks.client import Grid

    settings = harness_settings
    _prepared(settings)
    processes("services", "--scheduler", "--gatekeepers")
    child = _harness(processes, "standin")
    registry = NodeRegistry.from_url(settings.redis_url, settings.heartbeat_ttl)
    _alive(registry, child, NODES)
    # each identity its own heartbeat key, refreshed (not just the first beat)
    first = {s.node: s.last_heartbeat for s in registry.statuses([(RM, n) for n in NODES])}
    until(lambda: all(s.last_heartbeat > first[s.node] for s in
                      registry.statuses([(RM, n) for n in NODES])), 10, "a second beat each")
    until(lambda: _recorded_nodes(settings) == set(NODES), 30,
          "the gatekeeper to record all 20 registrations")
    answer = _node_check(settings, "h07")  # routed to that identity's own queue
    assert (answer["queue"], answer["served_by"]["node"]) == (f"node.{RM}.h07", "h07")

    with Grid(settings) as grid:
        job = grid.submit("&(executable=/bin/no-such-program)(count=1)", rm=RM).id
    state, code, history, allocated = _job_outcome(settings, job)
    # the stand-in forks nothing (a real launch of that program would fail) yet
    # reports through the gatekeeper as a real quick job does
    assert (state, code) == (JobState.DONE, 0)
    assert history == [JobState.PENDING, JobState.ACTIVE, JobState.DONE]
    assert len(allocated) == 1 and set(allocated) <= set(NODES)

    child.process.send_signal(signal.SIGKILL)
    child.process.wait(timeout=10)
    until(lambda: all(s.state is NodeState.UNKNOWN for s in
                      registry.statuses([(RM, n) for n in NODES])), 10,
          "every identity of the killed harness to go Unknown")


def test_a_job_runs_through_the_real_job_manager_on_an_identity(
        harness_settings, processes, tmp_path):
    from grid_tasks.client import Grid

    settings = harness_settings
    _prepared(settings)
    processes("services", "--scheduler", "--gatekeepers")
    child = _harness(processes, "real", nodes="h[01-04]")
    registry = NodeRegistry.from_url(settings.redis_url, settings.heartbeat_ttl)
    _alive(registry, child, NODES[:4])
    out = tmp_path / "out.txt"
    with Grid(settings) as grid:
        # only h01-h04 are served: the scheduler places the job on a live one
        job = grid.submit(f"&(executable=/bin/sh)(arguments=-c 'echo ran:$GRID_TASKS_JOB_ID')"
                          f"(stdout={out})(count=1)", rm=RM).id
    state, code, history, allocated = _job_outcome(settings, job)
    assert (state, code) == (JobState.DONE, 0)
    assert history == [JobState.PENDING, JobState.ACTIVE, JobState.DONE]
    assert set(allocated) <= set(NODES[:4])
    assert out.read_text().strip() == f"ran:{job}"  # a real process ran it


def test_an_identity_runs_only_launches_signed_by_a_scheduler(
        harness_settings, processes, tmp_path):
    settings = harness_settings
    keys = ensure_grid_keys(tmp_path / "keys", "alice", now=dt.datetime.now(dt.timezone.utc))
    signed_env = settings.replace(signing=keys.signing(Role.NODE), single_user=True).to_env()
    child = _harness(processes, "real", nodes="h[01-03]", **signed_env)
    registry = NodeRegistry.from_url(settings.redis_url, settings.heartbeat_ttl)
    _alive(registry, child, NODES[:3])
    markers = {name: tmp_path / f"{name}.marker" for name in ("unsigned", "user", "scheduler")}
    queue = f"node.{RM}.h02"

    def body(job: int, name: str) -> list:
        return launch_body(settings, job, markers[name], rm=RM, node="h02")

    push(settings.broker_url, queue, LAUNCH, body(801, "unsigned"), signed=False)
    push(settings.broker_url, queue, LAUNCH,
         sealed(keys.for_role(Role.USER), body(802, "user")), signed=True)
    push(settings.broker_url, queue, LAUNCH,
         sealed(keys.for_role(Role.SCHEDULER), body(803, "scheduler")), signed=True)
    until(markers["scheduler"].exists, 30, "the scheduler-signed launch to run")
    time.sleep(0.5)  # the refused ones came first: they had their chance
    assert not markers["unsigned"].exists(), "an unsigned launch ran on a harness identity"
    assert not markers["user"].exists(), "a user-signed launch ran on a harness identity"


def test_a_harness_naming_a_node_the_topology_lacks_does_not_start(
        harness_settings, grid_tasks_command):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRID_TASKS_")}
    env.update(harness_settings.to_env())
    proc = subprocess.run([*grid_tasks_command, "worker", "--harness", "--rm", RM,
                           "--nodes", "h[19-22]", "--no-check"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "h21" in proc.stderr and "not in the topology" in proc.stderr
