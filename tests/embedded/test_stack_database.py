"""The embedded stack's database: SQLite by default, or the PostgreSQL database an
operator names (``grid-tasks up --database-url`` / ``GRID_TASKS_DATABASE_URL``),
migrated once before any daemon starts, its password in no command line or log."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from sqlalchemy import select, text
from sqlalchemy.engine import make_url

from grid_tasks import db
from grid_tasks.db.testing import postgres_test_url, temporary_database
from grid_tasks.embedded.database import check_database_url
from grid_tasks.embedded.envfile import read_env_file
from grid_tasks.embedded.stack import EmbeddedStack, StackOptions
from grid_tasks.errors import ConfigError
from tests.conftest import CONFIG_DIR
from tests.waiting import until


def topology(tmp_path: Path) -> Path:
    path = tmp_path / "grid.toml"
    path.write_text(f'[rm.rmA]\npolicy_file = "{CONFIG_DIR / "demo.cfg"}"\n'
                    '[rm.rmA.node.node1]\nprocs = 2\n[rm.rmA.node.node2]\nprocs = 2\n')
    return path


@pytest.mark.parametrize("url", ["sqlite:////tmp/g.db", "postgresql+psycopg://u@h/db",
                                 "postgres://u:pw@h/db", "POSTGRESQL://h/db"])
def test_sqlite_and_postgresql_urls_are_accepted(url):
    assert check_database_url(url) == url


@pytest.mark.parametrize("url,scheme", [("mysql://u:pw@h/db", "'mysql'"),
                                        ("u:pw@h/db", "'missing'")])
def test_other_urls_are_refused_naming_the_option_not_the_password(tmp_path, url, scheme):
    with pytest.raises(ConfigError) as caught:
        EmbeddedStack(StackOptions(topology_file=topology(tmp_path), state_dir=tmp_path / "s",
                                   database_url=url))
    message = str(caught.value)
    assert message.startswith("grid-tasks up --database-url: not a SQLite or PostgreSQL URL")
    assert f"(scheme {scheme};" in message and "pw" not in message
    assert not (tmp_path / "s").exists()


@pytest.fixture
def private_postgres() -> Iterator[tuple[str, str]]:
    """(URL of a private schema on the test server with a password in it, the password).

    A trusting server (the test one) never asks for the password, so one is put in
    when the URL has none: then it is there to be leaked, and the test shows it is not."""
    server = postgres_test_url()
    if server is None:
        pytest.skip("GRID_TASKS_TEST_POSTGRES_URL is not set")
    with temporary_database(server, migrated=False, prefix="gt_stack") as scoped:
        url = make_url(scoped)
        if not url.password:
            url = url.set(password="not-in-any-argv-7f3a")
        yield url.render_as_string(hide_password=False), str(url.password)


@pytest.mark.postgres
@pytest.mark.timeout(120)
def test_a_stack_on_postgresql_migrates_once_and_keeps_the_password_out_of_argv(
        tmp_path, private_postgres):
    url, password = private_postgres
    state = tmp_path / "s"
    stack = EmbeddedStack(StackOptions(topology_file=topology(tmp_path), state_dir=state,
                                       database_url=url, announce=False, loglevel="WARNING",
                                       start_timeout=90))
    with stack:
        assert stack.settings is not None and stack.settings.database_url == url
        env_file = state / "stack.env"
        assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
        assert read_env_file(env_file).database_url == url  # other shells find it
        family = [psutil.Process(pid) for pid in stack.pids()]
        assert len(family) >= 6
        _recorded_by_gatekeeper(url, ["node1", "node2"])
        leaks = [p.pid for p in family if password in " ".join(_cmdline(p))]
        assert leaks == [], "the database password is in a command line"
        nodes = [c for c in stack.supervisor.children if c.name.startswith("node-")]
        assert nodes and all("GRID_TASKS_DATABASE_URL" not in psutil.Process(c.pid).environ()
                             for c in nodes)  # nodes hold no database credentials
    logs = [p for p in (state / "logs").iterdir() if password in p.read_text(errors="replace")]
    assert logs == []
    engine = db.get_engine(url)
    with engine.connect() as conn:  # migrated in its own schema, to the newest revision
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == \
            db.head_revision()
    db.dispose_engines(url)


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


def _recorded_by_gatekeeper(url: str, names: list[str]) -> None:
    """Every node's registration reached PostgreSQL (written by its RM's gatekeeper)."""

    def recorded() -> bool:
        with db.session_scope(db.session_factory(db.get_engine(url))) as session:
            rows = session.execute(select(db.Node.name, db.Node.registered_at)).all()
        return sorted(name for name, at in rows if at is not None) == names

    until(recorded, 30, "both nodes recorded in PostgreSQL")
