"""``grid-tasks maui-config``: tables, JSON, warnings and the caret display of errors."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from grid_tasks.cli import main

SAMPLE = Path(__file__).resolve().parents[3] / "config" / "maui.cfg"


def run(*args: str):
    return CliRunner().invoke(main, ["maui-config", *args])


def test_sample_prints_parameters_credentials_and_reservations() -> None:
    result = run(str(SAMPLE))
    assert result.exit_code == 0, result.output
    out = result.output
    assert "RESERVATIONDEPTH" in out and "BESTFIT" in out and "FIRSTFIT" in out  # value, default
    assert "USERCFG credentials" in out and "alice" in out and "FSTARGET=25+" in out
    assert "SRCFG standing reservations" in out and "interactive" in out
    assert "NODECFG nodes" in out and "node1" in out
    assert "differ from Maui's defaults" in out


def test_json_output(tmp_path: Path) -> None:
    cfg = tmp_path / "m.cfg"
    cfg.write_text("RMPOLLINTERVAL 00:00:15\nUSERCFG[a] MAXJOB=1,2\nBOGUS 1\n")
    result = run(str(cfg), "--json")
    assert result.exit_code == 0
    data = json.loads(result.output)
    assert data["parameters"] == {"RMPOLLINTERVAL": 15}
    assert data["effective"]["BACKFILLPOLICY"] == "FIRSTFIT"
    assert data["credentials"]["USER"]["a"]["MAXJOB"] == [1, 2]
    assert data["warnings"][0]["line"] == 3


def test_all_lists_every_parameter(tmp_path: Path) -> None:
    cfg = tmp_path / "m.cfg"
    cfg.write_text("")
    result = run(str(cfg), "--all")
    assert result.exit_code == 0
    assert "SIMINITIALQUEUEDEPTH" in result.output and "LOGFILEROLLDEPTH" in result.output


def test_warnings_are_printed_and_strict_fails_on_them(tmp_path: Path) -> None:
    cfg = tmp_path / "m.cfg"
    cfg.write_text("FSDEPTH 4\nNOTAPARAM 3\n")
    result = run(str(cfg))
    assert result.exit_code == 0
    assert "2:1: warning: unknown parameter 'NOTAPARAM'" in result.output
    assert run(str(cfg), "--strict").exit_code == 1


def test_error_is_shown_with_a_caret_and_exit_1(tmp_path: Path) -> None:
    cfg = tmp_path / "m.cfg"
    cfg.write_text("FSDEPTH 4\nBACKFILLPOLICY SOMETIMES\n")
    result = run(str(cfg))
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[0].startswith("error: ") and ":2:16:" in lines[0]
    assert lines[1] == "BACKFILLPOLICY SOMETIMES"
    assert lines[2] == " " * 15 + "^"
    assert "Traceback" not in result.output


def test_error_as_json(tmp_path: Path) -> None:
    cfg = tmp_path / "m.cfg"
    cfg.write_text("USERCFG[a] MAXJOB=x\n")
    result = run(str(cfg), "--json")
    assert result.exit_code == 1
    error = json.loads(result.output)["error"]
    assert (error["line"], error["column"], error["key"]) == (1, 19, "MAXJOB")


def test_missing_file_exits_1(tmp_path: Path) -> None:
    result = run(str(tmp_path / "absent.cfg"))
    assert result.exit_code == 1
    assert "cannot read" in result.output


def test_help() -> None:
    result = run("--help")
    assert result.exit_code == 0 and "--json" in result.output and "maui.cfg" in result.output
