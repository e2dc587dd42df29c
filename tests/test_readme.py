"""README's examples run as written (issue 23), against one real ``grid-tasks up``.

The shell examples (every indented block line that starts ``grid-tasks``, but ``up``
and ``demo``, with its continuation lines) run through bash from an unrelated
directory with no GRID_TASKS_* variable: they find the running grid by themselves.
The Python snippet runs with the variables ``up`` printed, as README says.  The
jobs call ``grid-tasks runtime barrier``: ``grid-tasks`` is on PATH (a wrapper
running this interpreter), as in an activated virtual environment.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from grid_tasks.embedded.stack import grid_tasks_command
from tests.conftest import DEMO_TOPOLOGY, REPO_ROOT

README = REPO_ROOT / "README.md"


def shell_examples(text: str) -> list[str]:
    """The ``grid-tasks`` commands of README's indented code blocks, continuation
    lines (deeper indented) included; ``up`` and ``demo`` left out (they are this
    test's grid, and another one)."""
    commands: list[str] = []
    for line in text.splitlines():
        if not line.startswith("    "):
            continue
        body = line[4:]
        if body.startswith("grid-tasks "):
            commands.append(body)
        elif body.startswith(" ") and commands and not body.lstrip().startswith("#"):
            commands[-1] += "\n" + body
    return [c for c in commands if c.split()[1] not in ("up", "demo")]


def python_example(text: str) -> str:
    """The ```python block of README's "From Python" section."""
    section = text.split("## From Python", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, "no python block under 'From Python'"
    return found.group(1)


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, str], str]]:
    """``grid-tasks up`` in a subprocess: (env for commands, what it printed)."""
    base = tmp_path_factory.mktemp("readme")
    bin_dir = base / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "grid-tasks"
    argv = " ".join(shlex.quote(a) for a in grid_tasks_command())
    wrapper.write_text(f"#!/bin/sh\nexec {argv} \"$@\"\n")
    wrapper.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRID_TASKS_")}
    env.update(PATH=f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}", COLUMNS="200",
               XDG_RUNTIME_DIR=str(base / "run"))  # this grid alone is found
    proc = subprocess.Popen(
        [*grid_tasks_command(), "up", "--state-dir", str(base / "state"), "--topology",
         str(DEMO_TOPOLOGY), "--heartbeat", "0.5", "--for", "120"],
        env=env, cwd=base, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        printed = []
        for line in proc.stdout:  # type: ignore[union-attr]
            printed.append(line)
            if "Ctrl-C stops the grid" in line:
                break
        assert proc.poll() is None, "".join(printed)
        elsewhere = base / "elsewhere"
        elsewhere.mkdir()
        yield {**env, "HOME": str(elsewhere)}, "".join(printed)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_readme_shell_examples_run_from_any_directory(up: tuple[dict[str, str], str]) -> None:
    env, _ = up
    commands = shell_examples(README.read_text())
    assert any(c.startswith("grid-tasks coalloc submit") for c in commands), commands
    elsewhere = Path(env["HOME"])
    # side by side (they only read, or queue one job each): the suite's time is precious
    running = [(c, subprocess.Popen(["bash", "-c", c], env=env, cwd=elsewhere, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE))
               for c in commands]
    for command, proc in running:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, (command, out[-3000:], err[-3000:])
        assert "error" not in err.lower(), (command, err)
        if command.startswith("grid-tasks coalloc submit"):
            assert re.search(r"duroc://coalloc/\d+\s+DONE\s+barrier released", out), out
            host = socket.gethostname()
            printed = sorted(line for line in out.splitlines() if line.startswith("["))
            assert printed == [f"[subjob0] {host}"] * 2 + [f"[subjob1] {host}"], out
    assert list(elsewhere.iterdir()) == []  # found, not created: no .state here


def test_readme_python_example_prints_done_and_the_outputs(up: tuple[dict[str, str],
                                                                    str]) -> None:
    env, printed = up
    exported = dict(re.findall(r"^\s*export (GRID_TASKS_\w+)='(.*)'$", printed, re.M))
    assert "GRID_TASKS_REDIS_URL" in exported, printed
    done = subprocess.run([sys.executable, "-c", python_example(README.read_text())],
                          env={**env, **exported}, cwd=env["HOME"], capture_output=True,
                          text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[:2] == ["DONE hello", "hello"], done.stdout
    assert "DONE" in lines
    subjobs = [line.split(" ", 2) for line in lines if line.startswith(("a ", "b "))]
    assert [(label, state) for label, state, _ in subjobs] == [("a", "DONE"), ("b", "DONE")]
    hostnames = [ast.literal_eval(out) for _, _, out in subjobs]
    assert [len(h) for h in hostnames] == [2, 3]  # each process printed its host


def test_a_barrier_subjob_that_never_enters_the_barrier_says_so(up: tuple[dict[str, str],
                                                                          str]) -> None:
    # README's former example: a plain /bin/hostname never enters the barrier
    env, _ = up
    rsl = ("+(&(executable=/bin/hostname)(resourceManagerContact=rmA))"
           "(&(executable=/bin/hostname)(resourceManagerContact=rmB))")
    done = subprocess.run([*grid_tasks_command(), "coalloc", "submit", "--wait", "--json",
                           rsl], env=env, cwd=env["HOME"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1, (done.stdout, done.stderr)
    status = json.loads(done.stdout)
    assert status["state"] == "FAILED"
    assert "without entering the barrier" in status["reason"], status
    assert "grid-tasks runtime barrier" in status["reason"]
