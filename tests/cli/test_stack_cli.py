"""``grid-tasks demo`` and ``grid-tasks up``: real processes, none left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.conftest import DEMO_TOPOLOGY
from tests.slurm_site import skip_reason


def stack_processes(state_dir: Path) -> list[psutil.Process]:
    """Every live process belonging to the stack kept in ``state_dir``."""
    marker = str(state_dir)
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid == os.getpid() or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            cmd = " ".join(proc.cmdline())
            if marker in cmd or proc.environ().get("GRID_TASKS_STATE_DIR") == marker:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _env(grid_env: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in grid_env.items() if not k.startswith("GRID_TASKS_")}
    env["COLUMNS"] = "200"
    return env


@pytest.mark.slow  # over 15 s: the 20-minute CI budget (run with -m slow)
def test_demo_checks_every_node_and_cleans_up(tmp_path, grid_env, grid_tasks_command):
    state = tmp_path / "demo"
    started = time.monotonic()
    proc = subprocess.run([*grid_tasks_command, "demo", "--state-dir", str(state), "--json"],
                          env=_env(grid_env), capture_output=True, text=True, timeout=90)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert elapsed < 60
    results = json.loads(proc.stdout)
    answered = {(r["rm"], r["node"]): r for r in results}
    assert set(answered) == {("rmA", "node1"), ("rmA", "node2"), ("rmB", "node3"),
                             ("rmB", "node4")}
    pids = set()
    for (rm, node), r in answered.items():
        assert r["queue"] == f"node.{rm}.{node}"
        assert r["served_by"] == {"rm": rm, "node": node, "worker": r["served_by"]["worker"]}
        assert r["served_by"]["worker"].startswith(f"{node}.{rm}@")
        assert r["detected"]["procs"] >= 1
        pids.add(r["facts"]["pid"])
    assert len(pids) == 4  # four separate daemons answered
    assert "grid up in" in proc.stderr and "Idle" in proc.stderr
    if skip_reason() is None:  # Slurm here: its cluster joined, with a coallocated subjob
        assert "Slurm cluster 'demo' (2 slurmd) serves RM slurm1" in proc.stderr
        assert "subjob slurm: global sum of squares" in proc.stderr, proc.stderr[-2000:]
    else:
        assert "no Slurm cluster in this demo: " in proc.stderr
    # result handles are released before the grid's Redis stops: no __del__ noise at exit
    assert "Traceback" not in proc.stderr and "Retry limit" not in proc.stderr, proc.stderr
    assert stack_processes(state) == []


@contextmanager
def _running_up(state: Path, grid_env: dict[str, str], command: list[str]) -> Iterator[Any]:
    """``grid-tasks up`` in a subprocess, read until it says how to stop it; yields
    ``(process, what it printed, its children)``; killed if still running at the end."""
    proc = subprocess.Popen([*command, "up", "--state-dir", str(state),
                             "--topology", str(DEMO_TOPOLOGY)],
                            env=_env(grid_env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "Ctrl-C stops the grid" in line:
                break
        yield proc, "".join(lines), psutil.Process(proc.pid).children(recursive=True)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _all_gone(family: list[psutil.Process], state: Path) -> None:
    assert [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []
    assert stack_processes(state) == []
    assert not (state / "stack.env").exists()


@pytest.mark.slow  # over 15 s: the 20-minute CI budget (run with -m slow)
def test_up_stops_everything_after_an_impatient_second_ctrl_c(tmp_path, grid_env,
                                                              grid_tasks_command):
    # `grid-tasks up | tee up.log`, then Ctrl-C twice: the first one also ends tee, so
    # what `up` prints while stopping meets a closed pipe, and the second one arrives
    # while it stops.  Neither may cut the stop short: nothing is left running.
    state = tmp_path / "up"
    with _running_up(state, grid_env, grid_tasks_command) as (proc, _, family):
        assert any("redis-server" in " ".join(p.cmdline()) for p in family)
        proc.stdout.close()
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)  # stopping by now
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        _all_gone(family, state)


@pytest.mark.slow  # over 15 s: the 20-minute CI budget (run with -m slow)
def test_up_stops_everything_on_sigterm(tmp_path, grid_env, grid_tasks_command):
    # (Ctrl-C, which `up` turns SIGTERM into: the impatient test above)
    state = tmp_path / "up"
    with _running_up(state, grid_env, grid_tasks_command) as (proc, out, family):
        assert "grid up in" in out, out
        assert "export GRID_TASKS_REDIS_URL=" in out
        assert len(family) >= 6  # redis + scheduler + 4 node daemons
        # another shell finds the running grid by its state dir
        listing = subprocess.run([*grid_tasks_command, "nodes", "--json", "--stack",
                                  str(state)], env=_env(grid_env), capture_output=True,
                                 text=True, timeout=60)
        assert listing.returncode == 0, listing.stderr
        assert [n["state"] for n in json.loads(listing.stdout)] == ["Idle"] * 4
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=30)[0]
        assert proc.returncode == 0, rest
        assert "no process left behind" in rest
        _all_gone(family, state)


# --- `up --slurm` and `up --database-url`: refused with a clear error, nothing started ---


def _small_topology(tmp_path: Path) -> Path:
    path = tmp_path / "grid.toml"
    path.write_text(f'[rm.rmA]\npolicy_file = "{DEMO_TOPOLOGY.parent / "demo.cfg"}"\n'
                    '[rm.rmA.node.node1]\nprocs = 2\n')
    return path


def _up(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    from click.testing import CliRunner

    from grid_tasks.cli import main

    clean = {k: None for k in os.environ if k.startswith("GRID_TASKS_")}
    return CliRunner().invoke(main, ["up", "--topology", str(_small_topology(tmp_path)),
                                     "--state-dir", str(tmp_path / "s"), "--for", "0", *args],
                              env={**clean, **(env or {})}, terminal_width=200)


def test_up_slurm_says_why_no_cluster_can_run_and_starts_nothing(tmp_path, monkeypatch):
    from grid_tasks.embedded import demo_slurm

    monkeypatch.setattr(demo_slurm, "missing_binaries", lambda: ["slurmd"])
    result = _up(tmp_path, "--slurm")
    assert result.exit_code == 1
    assert "no local Slurm cluster: Slurm is not installed (no slurmd)" in result.output
    assert stack_processes(tmp_path / "s") == []


def test_up_refuses_a_database_it_cannot_run_on_without_echoing_the_password(tmp_path):
    result = _up(tmp_path, env={"GRID_TASKS_DATABASE_URL": "mysql://grid:s3cret@db/grid"})
    assert result.exit_code == 1
    assert "--database-url: not a SQLite or PostgreSQL URL (scheme 'mysql'" in result.output
    assert "s3cret" not in result.output
    assert not (tmp_path / "s").exists()  # refused before the state dir was made


def test_up_warns_of_a_database_password_on_its_command_line(tmp_path):
    # an unknown topology ends it right after the options are read
    url = "postgresql+psycopg://grid:s3cret@127.0.0.1:1/grid"
    given = _up(tmp_path, "--database-url", url, "--topology", str(tmp_path / "none.toml"))
    assert "--database-url holds a password" in given.output, given.output
    quiet = _up(tmp_path, "--topology", str(tmp_path / "none.toml"),
                env={"GRID_TASKS_DATABASE_URL": url})
    assert "holds a password" not in quiet.output and quiet.exit_code == 1, quiet.output


def test_the_announced_database_url_hides_its_password():
    from grid_tasks.cli.stack import _masked

    assert _masked("postgresql+psycopg://grid:s3cret@db:5432/g?sslmode=require") == \
        "postgresql+psycopg://grid:***@db:5432/g?sslmode=require"
