"""``grid-tasks db`` through the real CLI entry point."""

from __future__ import annotations

import json

from click.testing import CliRunner
from sqlalchemy import text

from grid_tasks.cli import main
from grid_tasks.db import get_engine, head_revision
from grid_tasks.db.testing import temporary_database


def _run(*args: str, input: str | None = None):
    return CliRunner().invoke(main, list(args), input=input)


def test_upgrade_current_check_downgrade_cycle() -> None:
    with temporary_database(migrated=False) as url:
        before = _run("db", "--url", url, "current", "--json")
        assert before.exit_code == 0, before.output
        assert json.loads(before.output)["status"] == "not migrated"
        assert _run("db", "--url", url, "check").exit_code == 1

        up = _run("db", "--url", url, "upgrade", "--json")
        assert up.exit_code == 0, up.output
        assert json.loads(up.output) == {"database": url, "from": None, "to": head_revision()}

        checked = _run("db", "--url", url, "check", "--json")
        assert checked.exit_code == 0, checked.output
        report = json.loads(checked.output)
        assert report["ok"] is True and report["drift"] == []

        refused = _run("db", "--url", url, "downgrade", "base", input="n\n")
        assert refused.exit_code == 1 and "Aborted" in refused.output
        down = _run("db", "--url", url, "downgrade", "base", "--yes", "--json")
        assert down.exit_code == 0, down.output
        assert json.loads(down.output)["to"] is None


def test_check_reports_drift_and_fails() -> None:
    with temporary_database() as url:
        with get_engine(url).begin() as conn:
            conn.execute(text("DROP INDEX ix_jobs_rm_state"))
        result = _run("db", "--url", url, "check")
        assert result.exit_code == 1
        assert "ix_jobs_rm_state" in result.output


def test_default_url_comes_from_the_environment(tmp_path, monkeypatch) -> None:
    url = f"sqlite:///{tmp_path / 'env.db'}"
    monkeypatch.setenv("GRID_TASKS_DATABASE_URL", url)
    result = _run("db", "upgrade")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "env.db").exists()


def test_unreachable_database_is_one_line_without_traceback() -> None:
    url = "postgresql+psycopg://grid:s3cret@127.0.0.1:1/grid?connect_timeout=2"
    result = _run("db", "--url", url, "current")
    assert result.exit_code == 1
    assert result.output.startswith("error: cannot reach database")
    assert "s3cret" not in result.output and "Traceback" not in result.output


def test_help_explains_the_commands() -> None:
    result = _run("db", "--help")
    assert result.exit_code == 0
    for word in ("upgrade", "current", "downgrade", "check", "--url"):
        assert word in result.output
