"""``grid-tasks worker``: roles, validation and one-line errors."""

from __future__ import annotations

import os
import subprocess

import pytest
from click.testing import CliRunner

from grid_tasks.cli import main
from grid_tasks.cli.worker import worker_argv


def _run(args, env):
    return CliRunner().invoke(main, args, env=env)


def test_argv_for_each_role(settings):
    common = dict(settings=settings, pool="threads", concurrency=None, loglevel="INFO")
    node = worker_argv(rm="rmA", node="node1", scheduler=False, gatekeepers=False,
                       beat=False, **common)
    assert node[node.index("-Q") + 1] == "node.rmA.node1"
    assert node[node.index("-n") + 1] == "node1.rmA@%h"
    gate = worker_argv(rm="rmB", node=None, scheduler=False, gatekeepers=False, beat=False,
                       **common)
    assert gate[gate.index("-Q") + 1] == "gram.rmB"
    sched = worker_argv(rm=None, node=None, scheduler=True, gatekeepers=True, beat=True,
                        **common)
    assert sched[sched.index("-Q") + 1] == \
        "scheduler,iterate.rmA,iterate.rmB,gram.rmA,gram.rmB"
    assert "-B" in sched and str(settings.state_dir) in sched[sched.index("-s") + 1]


def test_an_rm_marked_own_leaves_the_shared_scheduler_for_a_worker_of_its_own(settings,
                                                                               tmp_path):
    from tests.test_scheduler_queues import own_topology

    mine = settings.replace(topology_file=own_topology(tmp_path, "rmA"))
    common = dict(rm=None, node=None, gatekeepers=False, beat=False, settings=mine,
                  pool=None, concurrency=None, loglevel="INFO")
    shared = worker_argv(scheduler=True, **common)
    assert shared[shared.index("-Q") + 1] == "scheduler,iterate.rmB"
    own = worker_argv(scheduler=False, iterations=("rmA",), **common)
    assert own[own.index("-Q") + 1] == "iterate.rmA"  # nothing but its RM's iterations
    assert own[own.index("-n") + 1] == "iterations.rmA@%h"
    # one process, one thread: its caches stay warm and no other RM runs beside it
    assert (own[own.index("-P") + 1], own[own.index("-c") + 1]) == ("threads", "1")


@pytest.mark.parametrize("args, code, words", [
    (["--iterations", "rmZ"], 2, "unknown resource manager 'rmZ'"),
    (["--iterations", "rmA", "--scheduler"], 2, "--iterations runs iterations only"),
    (["--iterations", "rmA", "--rm", "rmA"], 2, "--iterations runs iterations only"),
    (["--iterations", ","], 2, "--iterations needs resource manager names"),
])
def test_iterations_worker_mistakes(args, code, words, grid_env):
    result = _run(["worker", *args], grid_env)
    assert result.exit_code == code, result.output
    assert words in result.output + result.stderr


def test_node_daemons_default_to_the_solo_pool_and_other_roles_to_threads(settings):
    common = dict(settings=settings, concurrency=None, loglevel="INFO")

    def pool(**role):
        argv = worker_argv(**{"rm": None, "node": None, "scheduler": False,
                              "gatekeepers": False, "beat": False, **role, **common})
        return argv[argv.index("-P") + 1]

    assert pool(rm="rmA", node="node1", pool=None) == "solo"
    assert pool(rm="rmA", pool=None) == "threads"
    assert pool(scheduler=True, pool=None) == "threads"
    assert pool(rm="rmA", node="node1", pool="threads") == "threads"  # asked for: kept
    assert pool(rm="rmA", pool="solo") == "solo"


@pytest.mark.parametrize("args, words", [
    (["--rm", "rmZ"], "unknown resource manager 'rmZ'"),
    (["--rm", "rmA", "--node", "node3"], "unknown node 'node3' in resource manager 'rmA'"),
])
def test_unknown_names_are_one_line_errors(args, words, grid_env):
    result = _run(["worker", *args], grid_env)
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ") and words in result.stderr
    assert "Traceback" not in result.output + result.stderr


def test_usage_mistakes(grid_env):
    assert _run(["worker", "--node", "node1"], grid_env).exit_code == 2
    assert _run(["worker"], grid_env).exit_code == 2


def test_malformed_topology_names_file_line_and_key(grid_env, tmp_path):
    bad = tmp_path / "grid.toml"
    bad.write_text("[rm.rmA.node.node1]\nprocs = -4\n")
    result = _run(["worker", "--topology", str(bad), "--rm", "rmA", "--node", "node1"],
                  grid_env)
    assert result.exit_code == 1
    assert f"{bad}:2:1: procs must be at least 1, got -4 (key 'rm.rmA.node.node1.procs')" \
        in result.stderr


def test_unreachable_broker_subprocess_one_line_no_traceback(grid_env, grid_tasks_command):
    env = {**grid_env, "GRID_TASKS_BROKER_URL": "redis://127.0.0.1:1/1"}
    proc = subprocess.run([*grid_tasks_command, "worker", "--rm", "rmA", "--node", "node1"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot reach the broker")
    assert "Traceback" not in proc.stderr


def test_a_worker_stopped_by_an_unrecoverable_error_exits_non_zero(
        grid_env, grid_tasks_command):
    """The node daemon cannot register (its Redis is unreachable, the broker is fine):
    Celery stops the worker, and its exit code says so to systemd or a supervisor."""
    env = {**grid_env, "GRID_TASKS_REDIS_URL": "redis://127.0.0.1:1/3"}
    proc = subprocess.run([*grid_tasks_command, "worker", "--rm", "rmA", "--node", "node1",
                           "--no-check", "-l", "WARNING"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert "Unrecoverable error: ConnectivityError" in proc.stderr
    assert proc.returncode == 1


def test_bad_setting_is_named(grid_env):
    result = _run(["worker", "--rm", "rmA"],
                  {**grid_env, "GRID_TASKS_HEARTBEAT_INTERVAL": "often"})
    assert result.exit_code == 1
    assert "GRID_TASKS_HEARTBEAT_INTERVAL" in result.stderr


def test_unreachable_database_stops_the_scheduler(grid_env):
    env = {**grid_env,
           "GRID_TASKS_DATABASE_URL": "postgresql+psycopg://grid:secret@127.0.0.1:1/grid"}
    result = _run(["worker", "--scheduler"], env)
    assert result.exit_code == 1
    assert result.stderr.startswith("error: cannot reach database")
    assert "secret" not in result.stderr and "Traceback" not in result.stderr


def test_scheduler_syncs_topology_into_the_database(settings):
    db = pytest.importorskip("grid_tasks.db")
    from grid_tasks.cli.worker import sync_topology

    db.migrate(settings.database_url)
    assert sync_topology(settings)
    factory = db.session_factory(db.get_engine(settings.database_url))
    with db.session_scope(factory) as session:
        assert db.get_node(session, "rmB", "node4").procs == 2
    db.dispose_engines(settings.database_url)


@pytest.mark.skipif(os.geteuid() != 0, reason="the refusal is about root daemons")
def test_a_root_node_daemon_without_a_grid_map_refuses_to_start(grid_env, grid_tasks_command):
    """Every job of such a daemon would run as root: it says why and exits 1."""
    env = {k: v for k, v in grid_env.items() if k != "GRID_TASKS_SINGLE_USER"}
    done = subprocess.run([*grid_tasks_command, "worker", "--rm", "rmA", "--node", "node1",
                           "--no-check"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: environment: a node daemon running as root needs a grid map "
        "(GRID_TASKS_GRIDMAP): without one every job would run as root; set "
        "GRID_TASKS_GRIDMAP to map users to unprivileged accounts, or run the daemon as the "
        "one user whose jobs it runs (key 'GRID_TASKS_GRIDMAP')"]
    # the same daemon of a declared one-user grid starts (and is stopped by the timeout)
    one_user = subprocess.Popen([*grid_tasks_command, "worker", "--rm", "rmA", "--node",
                                 "node1", "--no-check"], env={**env, "GRID_TASKS_SINGLE_USER": "1"},
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            one_user.wait(timeout=3)
    finally:
        one_user.terminate()
        one_user.wait(timeout=20)


def test_a_missing_policy_file_refuses_scheduler_and_gatekeeper(tmp_path, grid_env):
    topo = tmp_path / "grid.toml"
    topo.write_text('[rm.rmA]\npolicy_file = "gone.cfg"\n[rm.rmA.node.node1]\nprocs = 1\n')
    for args in (["--scheduler"], ["--rm", "rmA"]):
        result = _run(["worker", *args, "--topology", str(topo)], grid_env)
        assert result.exit_code == 1, result.output
        assert f"{tmp_path / 'gone.cfg'} does not exist" in result.stderr
        assert f"{topo}:2:1" in result.stderr


def test_an_iterations_worker_for_a_shared_rm_says_it_is_not_isolated(settings, tmp_path,
                                                                       capsys):
    from grid_tasks.cli.worker import iterations_of
    from tests.test_scheduler_queues import own_topology

    assert iterations_of("rmA,rmB", settings) == ("rmA", "rmB")
    assert "rmA, rmB not marked scheduler = \"own\"" in capsys.readouterr().err
    mine = settings.replace(topology_file=own_topology(tmp_path, "rmA"))
    assert iterations_of("rmA", mine) == ("rmA",)
    assert capsys.readouterr().err == ""
