"""Commands find the running grid from any directory, or say there is none and how to
point at one, and a reading command creates nothing (issue 23, "one grid, one state").

The running grid here is what ``grid-tasks up`` leaves for others: its lock held, its
stack.env, its per-user record; tests/cli/test_readme.py does the same with a real ``up``.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone

import pytest
from click.testing import CliRunner

from grid_tasks.cli import main
from grid_tasks.db import Job, get_engine, migrate, session_factory, sync_topology
from grid_tasks.embedded.locate import StackLock, announce
from grid_tasks.embedded.envfile import ENV_FILE, read_env_file, write_env_file
from grid_tasks.states import JobState
from grid_tasks.topology import load_topology

TOPOLOGY = "[rm.rmX]\n[rm.rmX.node.nx1]\nprocs = 2\n"


def _run(tmp_path, *args, **env):
    """The CLI with no GRID_TASKS_* variable, run in an unrelated directory."""
    unset = {k: None for k in os.environ if k.startswith("GRID_TASKS_")}
    env.setdefault("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    cwd = os.getcwd()
    os.chdir(elsewhere)
    try:
        return CliRunner().invoke(main, list(args), env={**unset, **env}, terminal_width=200)
    finally:
        os.chdir(cwd)


@pytest.fixture
def running(settings, tmp_path):
    """A grid 'running' in tmp_path/st/embedded (as `up` on GRID_TASKS_STATE_DIR=st):
    lock held, stack.env written, recorded."""
    state = tmp_path / "st" / "embedded"
    topo = tmp_path / "grid.toml"
    topo.write_text(TOPOLOGY)
    mine = settings.replace(state_dir=state, topology_file=topo,
                            database_url=f"sqlite:///{state / 'grid_tasks.db'}")
    lock = StackLock(state)
    lock.acquire()
    write_env_file(state / ENV_FILE, mine)
    announce(state, {"XDG_RUNTIME_DIR": str(tmp_path / "run")})
    migrate(mine.database_url)
    factory = session_factory(get_engine(mine.database_url))
    with factory() as s:
        sync_topology(s, load_topology(topo))
        job = Job(rm="rmX", user="ann", state=JobState.PENDING, walltime=600,
                  maui_state=JobState.PENDING.maui, submit_time=datetime.now(timezone.utc))
        s.add(job)
        s.commit()
        job_id = job.id
    yield state, job_id
    lock.release()


def test_no_grid_is_said_with_the_way_to_point_at_one_and_nothing_is_created(tmp_path):
    for args in (["showq"], ["nodes"], ["checkjob", "1"],
                 ["submit", "-r", "rmA", "-b", "&(executable=/bin/true)"]):
        result = _run(tmp_path, *args)
        assert result.exit_code == 1, (args, result.output)
        assert "error: no running grid found from" in result.stderr, (args, result.stderr)
        assert "grid-tasks up" in result.stderr and "GRID_TASKS_STATE_DIR" in result.stderr
        assert "Traceback" not in result.output
    assert list((tmp_path / "elsewhere").iterdir()) == []  # no .state, no database
    assert not (tmp_path / "run").exists()


def test_the_running_grid_is_found_from_another_directory(running, tmp_path):
    state, job_id = running
    shown = _run(tmp_path, "showq", "--json")
    assert shown.exit_code == 0, (shown.stderr, shown.exception)
    queue = json.loads(shown.stdout)
    assert [r["job_id"] for r in queue["idle"]] == [job_id]
    listed = json.loads(_run(tmp_path, "nodes", "--json").stdout)
    assert [(n["rm"], n["node"]) for n in listed] == [("rmX", "nx1")]
    # pointed at explicitly: by the stack's state dir, or the GRID_TASKS_STATE_DIR `up` used
    for how in ({"GRID_TASKS_STATE_DIR": str(state)},
                {"GRID_TASKS_STATE_DIR": str(state.parent)}):
        shown = _run(tmp_path, "nodes", "--json", **how)
        assert shown.exit_code == 0, (how, shown.stderr)
        listed = json.loads(shown.stdout)
        assert [n["node"] for n in listed] == ["nx1"]
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_a_stale_stack_env_is_no_grid_and_two_grids_must_be_told_apart(running, tmp_path):
    state, _ = running
    stale = tmp_path / "elsewhere" / ".state" / "embedded"
    stale.mkdir(parents=True)
    (stale / ENV_FILE).write_text((state / ENV_FILE).read_text())  # its grid was killed
    result = _run(tmp_path, "nodes", "--stack", str(stale))
    assert result.exit_code == 1 and f"no running grid in {stale}" in result.stderr
    other = StackLock(tmp_path / "other")
    other.acquire()
    try:
        write_env_file(tmp_path / "other" / ENV_FILE, read_env_file(state / ENV_FILE))
        announce(tmp_path / "other", {"XDG_RUNTIME_DIR": str(tmp_path / "run")})
        result = _run(tmp_path, "showq")
        assert result.exit_code == 1 and "several grids run" in result.stderr
        assert str(state) in result.stderr and str(tmp_path / "other") in result.stderr
    finally:
        other.release()

