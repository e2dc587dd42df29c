"""The CLI on a stopped database: one line naming the database and the cause, exit 1,
no traceback (issue 21: a submission during an outage printed a 141-line one)."""

from __future__ import annotations

import os
import subprocess
from typing import Any

import pytest

from grid_tasks.db import dispose_engines, mask_url, migrate
from grid_tasks.embedded.stack import grid_tasks_command
from grid_tasks.faults.postgres import PostgresUnavailable, PrivatePostgres


@pytest.fixture(scope="module")
def stopped_postgres() -> Any:
    """A private PostgreSQL server with the schema, stopped."""
    try:
        server = PrivatePostgres().start()
    except PostgresUnavailable as exc:
        pytest.skip(str(exc))
    try:
        migrate(server.url)
        dispose_engines()
        server.stop()
        yield server
    finally:
        server.close()


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(grid_tasks_command(*args), env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("argv", [("showq",), ("checkjob", "1")])
def test_a_command_on_a_stopped_database_prints_one_line(settings, stopped_postgres,
                                                         argv: tuple[str, ...]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRID_TASKS_")}
    env.update(settings.replace(database_url=stopped_postgres.url).to_env())
    done = _run(env, *argv)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    assert lines[0].startswith("error: ") and mask_url(stopped_postgres.url) in lines[0]
    assert "refused" in lines[0].lower() or "failed" in lines[0].lower()
