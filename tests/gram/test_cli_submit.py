"""``grid-tasks submit`` against a live grid, as a user would run it."""

from __future__ import annotations

import json
import subprocess

from click.testing import CliRunner

from grid_tasks.cli import main
from grid_tasks.embedded.stack import grid_tasks_command


def _invoke(module_grid, *args: str):
    """In-process (fast); the grid's settings reach Grid() through the environment."""
    runner = CliRunner()
    return runner.invoke(main, ["submit", *args], env=module_grid.settings.to_env(),
                         catch_exceptions=False)


def test_batch_mode_prints_the_contact_from_a_real_command(module_grid):
    batch = subprocess.run(grid_tasks_command("submit", "-r", "rmA", "-b",
                                              "&(executable=/bin/true)"),
                           env=module_grid.env, capture_output=True, text=True, timeout=60)
    assert batch.returncode == 0, batch.stderr
    contact = batch.stdout.strip()
    assert contact.startswith("gram://rmA/jobs/")
    assert module_grid.grid.job(contact).wait(timeout=30).state.value == "DONE"


def test_stream_json_and_exit_codes(module_grid, tmp_path):
    rsl = tmp_path / "job.rsl"
    rsl.write_text("&(executable=/bin/sh)(arguments=-c 'echo out; echo err >&2; exit 3')")
    streamed = _invoke(module_grid, "-r", "rmA", "-s", "-f", str(rsl))
    assert streamed.exit_code == 3
    assert streamed.stdout.startswith("out\n") and "err" in streamed.stderr
    assert "DONE (exit code 3)" in streamed.stdout

    as_json = _invoke(module_grid, "-r", "rmB", "--json", "&(executable=/bin/echo)(arguments=x)")
    assert as_json.exit_code == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert data["state"] == "DONE" and data["rm"] == "rmB" and data["exit_codes"] == {"0": 0}


def test_refusals_are_one_line_errors(module_grid, tmp_path):
    bad = _invoke(module_grid, "-r", "rmA", "&(executable=/bin/true)(count=zero)")
    assert bad.exit_code == 1 and "error" in bad.stderr and "^" in bad.stderr
    assert "Traceback" not in bad.stderr
    unknown = _invoke(module_grid, "-r", "nowhere", "&(executable=/bin/true)")
    assert unknown.exit_code == 1 and "nowhere" in unknown.stderr and "rmA" in unknown.stderr
    huge = _invoke(module_grid, "-r", "rmB", "&(executable=/bin/true)(count=50)")
    assert huge.exit_code == 1 and "can never run" in huge.stderr
    missing = _invoke(module_grid, "-r", "rmA", f"&(executable={tmp_path}/none)")
    assert missing.exit_code == 1 and "EXECUTABLE_NOT_FOUND" in missing.stderr
    conflict = _invoke(module_grid, "-r", "rmA",
                       "&(executable=/bin/true)(resourceManagerContact=rmB)")
    assert conflict.exit_code == 1
    assert "resourceManagerContact=rmB but was sent to rmA" in conflict.stderr
    greedy = _invoke(module_grid, "-r", "rmA", "&(executable=/bin/true)(maxMemory=999999)")
    assert greedy.exit_code == 1, greedy.stdout
    assert "999999 MB (maxMemory) and its largest node has 4096 MB" in greedy.stderr
    neither = _invoke(module_grid)
    assert neither.exit_code == 2 and "exactly one" in neither.stderr
