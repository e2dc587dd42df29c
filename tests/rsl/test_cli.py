"""``grid-tasks rsl check``: exit codes, JSON and caret output."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from grid_tasks.cli import main

from .helpers import position_of

VALID = '+(&(resourceManagerContact = rm1)(count = 2)(executable = $(HOME)/a))(&(resourceManagerContact = rm2)(executable = /bin/b)(label = two))'
INVALID = "&(executable = /bin/ls)\n  (count = 1)\n  (jobType = sideways)"


def run(args: list[str], stdin: str | None = None):
    return CliRunner().invoke(main, ["rsl", "check", *args], input=stdin)


def test_valid_json_from_stdin() -> None:
    result = run(["--json", "--var", "HOME=/h"], stdin=VALID)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["valid"] is True
    assert [s["rm_contact"] for s in doc["subjobs"]] == ["rm1", "rm2"]
    assert doc["subjobs"][0]["executable"] == "/h/a"
    assert doc["subjobs"][1]["label"] == "two"


def test_valid_table_from_file(tmp_path: Path) -> None:
    path = tmp_path / "job.rsl"
    path.write_text(VALID)
    result = run([str(path), "--var", "HOME=/h"])
    assert result.exit_code == 0, result.output
    assert "2 subjob(s)" in result.output
    assert "&(count = 2)(executable = /h/a)" in result.output


def test_invalid_json_reports_code_and_position(tmp_path: Path) -> None:
    path = tmp_path / "bad.rsl"
    path.write_text(INVALID)
    result = run(["--json", str(path)])
    assert result.exit_code == 1
    doc = json.loads(result.output)
    line, column = position_of(INVALID, "sideways")
    assert doc["valid"] is False
    assert doc["error"]["code"] == "INVALID_JOBTYPE"
    assert (doc["error"]["line"], doc["error"]["column"]) == (line, column)
    assert "sideways" in doc["error"]["message"]


def test_invalid_without_json_shows_a_caret() -> None:
    result = run([], stdin=INVALID)
    assert result.exit_code == 1
    line, column = position_of(INVALID, "sideways")
    lines = result.output.splitlines()
    assert any("INVALID_JOBTYPE" in l and f"<stdin>:{line}:{column}" in l for l in lines)
    caret_at = lines.index("  (jobType = sideways)") + 1
    assert lines[caret_at] == " " * (column - 1) + "^"


def test_undefined_variable_and_syntax_error_exit_1() -> None:
    result = run(["--json"], stdin="&(executable = $(NOT_SET_ANYWHERE_42))")
    assert result.exit_code == 1 and json.loads(result.output)["error"]["code"] == "RSL_EVALUATION_FAILED"
    result = run(["--json"], stdin="&(executable = ")
    assert result.exit_code == 1 and json.loads(result.output)["error"]["code"] == "BAD_RSL"


def test_bad_var_option_and_missing_file() -> None:
    assert run(["--var", "NOEQUALS"], stdin=VALID).exit_code == 2
    assert run(["/nonexistent/dir/job.rsl"]).exit_code != 0


def test_check_agrees_with_submit_on_the_job_managers_variables() -> None:
    text = ("&(executable = /bin/sh)(directory = $(HOME))"
            "(arguments = $(GLOBUS_GRAM_JOB_CONTACT) $(GLOBUS_GATEKEEPER_SUBJECT))")
    result = CliRunner().invoke(main, ["rsl", "check", "--json"], input=text,
                                env={"HOME": "/home/me"})
    assert result.exit_code == 0, result.output
    (job,) = json.loads(result.output)["subjobs"]
    assert job["directory"] == "/home/me"
    assert job["arguments"] == ["$(GLOBUS_GRAM_JOB_CONTACT)", "$(GLOBUS_GATEKEEPER_SUBJECT)"]
    undefined = run(["--json"], stdin="&(executable = $(NOT_A_GRAM_VARIABLE))")
    assert undefined.exit_code == 1
    assert json.loads(undefined.output)["error"]["code"] == "RSL_EVALUATION_FAILED"
