"""``grid-tasks selftest --security``: every attack refused on a real private grid, and a
deliberately weakened grid caught (a MISS row, exit status 1)."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from grid_tasks.cli import main
from grid_tasks.selftest.bounds import MilBacktracking, RslDoubling
from grid_tasks.selftest.registry import ATTACKS
from grid_tasks.selftest.runner import run_attacks

def test_list_names_every_attack() -> None:
    result = CliRunner().invoke(main, ["selftest", "--security", "--list"])
    assert result.exit_code == 0
    assert [line.split(":")[0] for line in result.output.splitlines()] == list(ATTACKS)


def test_unknown_attack_weakening_and_both_flags_are_clear_errors() -> None:
    result = CliRunner().invoke(main, ["selftest", "--security", "--attack", "nope"])
    assert result.exit_code == 1 and "unknown attack(s) nope" in result.output
    assert "unsigned-launch" in result.output
    result = CliRunner().invoke(main, ["selftest", "--security", "--weaken", "nope"])
    assert result.exit_code == 1 and "unknown weakening(s) nope" in result.output
    result = CliRunner().invoke(main, ["selftest", "--security", "--faults"])
    assert result.exit_code == 1 and "not both" in result.output


def test_every_attack_is_refused_on_a_private_grid(tmp_path) -> None:
    rows = {row.attack: row for row in run_attacks(state_dir=tmp_path)}
    assert list(rows) == list(ATTACKS)
    misses = {name: row.happened for name, row in rows.items() if not row.ok}
    assert misses == {}
    expected = "skipped" if os.geteuid() != 0 else "ok"
    assert rows["job-stdin-root-file"].verdict == expected
    assert all(row.verdict == "ok" for name, row in rows.items()
               if name != "job-stdin-root-file")
    # the bounds are refused, not merely survived: the rows say with which error
    assert "RSL_EVALUATION_FAILED" in rows[RslDoubling.name].happened
    assert "refused" in rows[MilBacktracking.name].happened


@pytest.mark.slow  # over 15 s: the 20-minute CI budget (run with -m slow)
def test_a_node_accepting_unsigned_messages_is_caught(tmp_path) -> None:
    """node1 restarted with GRID_TASKS_SIGNING=0: the forged launch runs, the row says
    MISS and the command exits 1; the control row on the same grid stays ok."""
    result = CliRunner().invoke(main, [
        "selftest", "--security", "--attack", "unsigned-launch", "--attack", "untrusted-submit",
        "--weaken", "unsigned-node", "--json", "--state-dir", str(tmp_path)])
    assert result.exit_code == 1, result.output
    rows = {row["attack"]: row for row in json.loads(result.stdout)}
    assert rows["unsigned-launch"]["verdict"] == "MISS"
    assert "the launch RAN" in rows["unsigned-launch"]["happened"]
    assert rows["untrusted-submit"]["verdict"] == "ok"


@pytest.mark.slow  # over 15 s: the 20-minute CI budget (run with -m slow)
def test_a_user_trusted_as_scheduler_and_jobs_as_root_are_caught(tmp_path) -> None:
    """The user's certificate also in certs/scheduler/: its forged launch runs.  With no
    grid map (as root, jobs run as root), the job reads the daemon's environment."""
    weakened = ["user-as-scheduler"] + (["jobs-as-root"] if os.geteuid() == 0 else [])
    rows = {r.attack: r for r in run_attacks(["user-signed-launch", "job-reads-daemon-env"],
                                             state_dir=tmp_path, weakened=weakened)}
    assert rows["user-signed-launch"].verdict == "MISS"
    assert "the launch RAN" in rows["user-signed-launch"].happened
    if os.geteuid() == 0:
        assert rows["job-reads-daemon-env"].verdict == "MISS"
        assert "password LEAKED" in rows["job-reads-daemon-env"].happened
