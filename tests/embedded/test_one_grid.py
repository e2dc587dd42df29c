"""One grid, one state (issue 23): a state dir is held by one running stack, a
crashed one never blocks, the demo keeps a state of its own, and a topology whose
policy file is missing starts nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from grid_tasks.cli import main
from grid_tasks.cli.stack import demo_state_dir
from grid_tasks.embedded.locate import (StackLock, StateDirInUse, announce, grid_running,
                                        records_dir, running_grids, withdraw)
from grid_tasks.embedded.stack import ENV_FILE, EmbeddedStack, StackOptions
from grid_tasks.errors import ConfigError
from tests.conftest import CONFIG_DIR, DEMO_TOPOLOGY


def test_a_state_dir_is_held_by_one_stack_and_free_again_after(tmp_path):
    first, second = StackLock(tmp_path / "s"), StackLock(tmp_path / "s")
    first.acquire()
    assert grid_running(tmp_path / "s")
    with pytest.raises(StateDirInUse, match=rf"{tmp_path / 's'} is in use by a running "
                                            rf"grid \(pid {os.getpid()}\)"):
        second.acquire()
    first.release()
    assert not grid_running(tmp_path / "s")
    second.acquire()
    second.release()


def test_a_killed_grid_never_blocks_the_next(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from grid_tasks.embedded.locate import "
         "StackLock; StackLock(sys.argv[1]).acquire(); print('held', flush=True); "
         "time.sleep(60)", str(tmp_path / "s")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert grid_running(tmp_path / "s")
        with pytest.raises(StateDirInUse, match=f"pid {holder.pid}"):
            StackLock(tmp_path / "s").acquire()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert not grid_running(tmp_path / "s")  # the kernel dropped the lock with it
    lock = StackLock(tmp_path / "s")
    lock.acquire()
    lock.release()


def test_a_second_stack_on_a_state_dir_in_use_is_refused_and_touches_nothing(tmp_path):
    state = tmp_path / "s"
    running = StackLock(state)
    running.acquire()
    (state / ENV_FILE).write_text("GRID_TASKS_REDIS_URL=redis://127.0.0.1:9/3\n")
    try:
        stack = EmbeddedStack(StackOptions(topology_file=DEMO_TOPOLOGY, state_dir=state))
        with pytest.raises(StateDirInUse, match="in use by a running grid"):
            stack.start()
        stack.stop()  # as `up` would in a finally: still not the other grid's files
        assert stack.redis.process is None and stack.supervisor.children == []
        assert (state / ENV_FILE).read_text().startswith("GRID_TASKS_REDIS_URL=")
        result = CliRunner().invoke(main, ["demo", "--state-dir", str(state)])
        assert result.exit_code == 1 and "in use by a running grid" in result.stderr
        assert (state / ENV_FILE).exists()
    finally:
        running.release()


def test_the_demo_keeps_a_state_of_its_own_and_removes_it():
    with demo_state_dir(None) as folder:
        assert folder.is_dir() and not any(folder.iterdir())
        assert folder.resolve() != (Path(".state") / "embedded").resolve()
    assert not folder.exists()
    with demo_state_dir(Path("chosen")) as chosen:
        assert chosen == Path("chosen")


def test_running_grids_are_recorded_per_user_and_stale_records_skipped(tmp_path):
    env = {"XDG_RUNTIME_DIR": str(tmp_path / "run")}
    live, dead = StackLock(tmp_path / "live"), tmp_path / "dead"
    live.acquire()
    try:
        announce(tmp_path / "live", env)
        announce(dead, env)  # a grid killed by SIGKILL: its record, no lock
        assert records_dir(env) == tmp_path / "run" / "grid_tasks"
        assert running_grids(env) == [(tmp_path / "live").resolve()]
        withdraw(tmp_path / "live", env)
        assert running_grids(env) == []
    finally:
        live.release()
    assert records_dir({"XDG_STATE_HOME": "/x"}) == Path("/x/grid_tasks/running")


def _topology_without_policy(tmp_path: Path) -> Path:
    folder = tmp_path / "conf"
    folder.mkdir()
    topo = folder / "grid.toml"
    text = DEMO_TOPOLOGY.read_text().replace('policy_file = "demo.cfg"', 'policy_file = "x.cfg"',
                                             1)
    (folder / "demo.cfg").write_text((CONFIG_DIR / "demo.cfg").read_text())
    topo.write_text(text)
    return topo


def test_a_missing_policy_file_starts_nothing_and_is_named_resolved(tmp_path, monkeypatch):
    topo = _topology_without_policy(tmp_path)
    state = tmp_path / "state"
    stack = EmbeddedStack(StackOptions(topology_file=topo, state_dir=state))
    with pytest.raises(ConfigError) as caught:
        stack.start()
    err = caught.value
    assert f"policy file {tmp_path / 'conf' / 'x.cfg'} does not exist" in str(err)
    assert err.key == "rm.rmA.policy_file" and err.line is not None
    assert 'policy_file = "x.cfg"' in err.pretty()
    assert not state.exists()  # refused before anything was made
    monkeypatch.chdir(tmp_path)  # the message does not depend on where `up` runs
    result = CliRunner().invoke(main, ["up", "--topology", "conf/grid.toml",
                                       "--state-dir", str(state)])
    assert result.exit_code == 1, result.output
    assert f"{tmp_path / 'conf' / 'x.cfg'} does not exist" in result.stderr
    assert not state.exists()
