"""``grid-tasks runtime ...`` from shell scripts, the way non-Python programs use it."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable
from pathlib import Path

from grid_tasks.duroc.store import CoordinationStore
from grid_tasks.duroc.store_models import SubjobSpec
from tests.runtime.conftest import Proc

SCRIPT = r"""
set -u
grid-tasks runtime barrier || exit 3
if [ "$GRID_TASKS_SUBJOB_LABEL" = one ]; then
  grid-tasks runtime bootstrap "one:1" --timeout 20 > "$OUT/all-one"
  grid-tasks runtime bootstrap --exchange 1 "one again" --timeout 20 > "$OUT/again-one"
  exit
fi
rank=$(grid-tasks runtime rank)
size=$(grid-tasks runtime size)
printf 'from %s\n' "$rank" | grid-tasks runtime send --rank $(( (rank + 1) % size )) ring
msg=$(grid-tasks runtime receive ring --timeout 20)
if [ "$rank" = 0 ]; then
  grid-tasks runtime structure --json > "$OUT/structure-two.json"
  grid-tasks runtime bootstrap "two:$size" --timeout 20 > "$OUT/all-two"
  grid-tasks runtime bootstrap --exchange 1 "two again" --timeout 20 > "$OUT/again-two"
else
  grid-tasks runtime structure 2> "$OUT/refused-$rank" && exit 4
fi
echo "rank=$rank msg=$msg"
"""


def test_shell_job_uses_every_runtime_command(
        store: CoordinationStore, launch: Callable[..., list[Proc]],
        grid_tasks_command: list[str], tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text(SCRIPT)
    bin_dir = tmp_path / "bin"  # the script calls plain "grid-tasks", as a user's would
    bin_dir.mkdir()
    wrapper = bin_dir / "grid-tasks"
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.join(grid_tasks_command)} "$@"\n')
    wrapper.chmod(0o755)
    store.create_job("shell", [SubjobSpec("one", 1), SubjobSpec("two", 2)])
    url = store.grant_access("shell")
    extra = {"PATH": f"{bin_dir}:{os.environ.get('PATH', '')}", "OUT": str(tmp_path)}
    argv = ["sh", str(script)]
    procs = launch(url, "shell", 0, "one", 1, argv, **extra) + \
        launch(url, "shell", 1, "two", 2, argv, **extra)
    store.await_entries("shell", timeout=30)
    time.sleep(0.2)
    assert all(p.popen.poll() is None for p in procs)
    store.release("shell")
    lines = []
    for proc in procs:
        code, out, err = proc.finish(60)
        assert code == 0, err
        lines.append(out.strip())
    assert lines == ["", "rank=0 msg=from 1", "rank=1 msg=from 0"]
    layout = json.loads((tmp_path / "structure-two.json").read_text())
    assert (layout["local_address"], layout["remote_addresses"]) == (1, [0])
    assert [s["label"] for s in layout["subjobs"]] == ["one", "two"]
    for label in ("one", "two"):
        assert (tmp_path / f"all-{label}").read_text() == "one:1\ntwo:2\n"
        assert (tmp_path / f"again-{label}").read_text() == "one again\ntwo again\n"
    assert "rank 0 of each subjob" in (tmp_path / "refused-1").read_text()
    store.purge("shell")


def test_receive_json_and_abort_exit_status(
        store: CoordinationStore, grid_env: dict[str, str],
        grid_tasks_command: list[str]) -> None:
    store.create_job("cli", [SubjobSpec("a", 2)])
    url = store.grant_access("cli")
    env = {**grid_env, "GRID_TASKS_RUNTIME_URL": url, "GRID_TASKS_COALLOC_ID": "cli",
           "GRID_TASKS_SUBJOB_INDEX": "0", "GRID_TASKS_RANK": "1", "GRID_TASKS_SIZE": "2"}

    def run(*args: str, data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([*grid_tasks_command, "runtime", *args], env=env, input=data,
                              capture_output=True, timeout=60)

    assert run("send", "--rank", "1", "bin", data=b"\xff\x00raw").returncode == 0
    received = run("receive", "bin", "--json")
    assert json.loads(received.stdout) == {"sender": 1, "tag": "bin", "text": None,
                                           "base64": "/wByYXc="}
    timed_out = run("receive", "bin", "--timeout", "0.2")
    assert timed_out.returncode == 1 and b"no message with tag 'bin'" in timed_out.stderr
    assert run("send", "bin", "x").returncode == 2  # neither --rank nor --subjob
    waiting = subprocess.Popen([*grid_tasks_command, "runtime", "barrier"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while store.snapshot("cli").subjobs[0].entered == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    store.abort("cli", "operator cancel")
    out, err = waiting.communicate(timeout=30)
    assert waiting.returncode == 1
    assert err.decode().startswith("error: coallocated job 'cli': aborted: operator cancel")
    assert "Traceback" not in err.decode()
    store.purge("cli")


def test_structure_table_and_barrier_json_in_process(store: CoordinationStore) -> None:
    from click.testing import CliRunner

    from grid_tasks.cli import main

    store.create_job("table", [SubjobSpec("alpha", 1), SubjobSpec("beta", 1)])
    url = store.grant_access("table")
    env = {"GRID_TASKS_RUNTIME_URL": url, "GRID_TASKS_COALLOC_ID": "table",
           "GRID_TASKS_SUBJOB_INDEX": "0", "GRID_TASKS_RANK": "0", "GRID_TASKS_SIZE": "1"}
    store.enter("table", 1, 0)
    runner = CliRunner()
    with ThreadPoolExecutor(1) as pool:
        barrier = pool.submit(runner.invoke, main, ["runtime", "barrier", "--json"], env=env)
        store.await_entries("table", timeout=20)
        store.release("table")
        result = barrier.result(timeout=20)
        assert result.exit_code == 0, result.output
        assert [s["label"] for s in json.loads(result.output)["structure"]["subjobs"]] == [
            "alpha", "beta"]
        other = pool.submit(store.join_group, "table", 1, 20)
        table = runner.invoke(main, ["runtime", "structure"], env=env)
        other.result(timeout=20)
    assert table.exit_code == 0, table.output
    assert "inter-subjob group (local address 0)" in table.output
    assert "alpha" in table.output and "beta" in table.output
    store.purge("table")
