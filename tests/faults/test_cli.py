"""``grid-tasks selftest``: listing, typed refusals, one real case as JSON."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from grid_tasks.cli import main
from grid_tasks.faults.registry import CASES


def test_list_names_every_case() -> None:
    result = CliRunner().invoke(main, ["selftest", "--list"])
    assert result.exit_code == 0
    assert [line.split(":")[0] for line in result.output.splitlines()] == list(CASES)


def test_unknown_case_and_missing_flag_are_clear_errors() -> None:
    result = CliRunner().invoke(main, ["selftest", "--faults", "--case", "nope"])
    assert result.exit_code == 1
    assert "unknown fault case(s) nope" in result.output and "redis-restart" in result.output
    result = CliRunner().invoke(main, ["selftest"])
    assert result.exit_code == 1 and "give --faults" in result.output


@pytest.mark.slow  # over 15 s: the 20-minute CI budget (run with -m slow)
def test_one_case_as_json(tmp_path) -> None:
    result = CliRunner().invoke(main, ["selftest", "--faults", "--case",
                                       "broker-mid-enactment", "--json",
                                       "--state-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert [o["case"] for o in payload] == ["broker-mid-enactment"]
    (outcome,) = payload
    assert outcome["recovered"] and outcome["ok"] and outcome["recovery_s"] > 0
    assert {c["name"] for c in outcome["checks"]} >= {"no leaked token",
                                                      "no leftover process"}
