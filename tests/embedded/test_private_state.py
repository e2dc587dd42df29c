"""State files 0600 in 0700 folders, whatever the umask, and loose ones tightened.

Real files, a real SQLite engine (WAL), the real redis-server and supervisor."""

from __future__ import annotations

import logging
import os
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import text

from grid_tasks.db.engine import make_engine
from grid_tasks.embedded.redis_server import RedisServer
from grid_tasks.embedded.envfile import write_env_file
from grid_tasks.embedded.supervisor import Supervisor
from grid_tasks.private_files import StateDirError, private_dir, private_file
from grid_tasks.schedmods.logrotate import RotatingLog
from grid_tasks.settings import Settings


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@contextmanager
def umask(value: int) -> Iterator[None]:
    old = os.umask(value)
    try:
        yield
    finally:
        os.umask(old)


def test_new_folders_and_files_are_private_whatever_the_umask(tmp_path: Path) -> None:
    with umask(0):
        folder = private_dir(tmp_path / "a" / "b")
        made = private_file(folder / "f")
    assert mode(tmp_path / "a") == mode(folder) == 0o700
    assert mode(made) == 0o600


def test_a_loose_state_dir_and_file_are_tightened_with_a_log_line(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "state").mkdir(mode=0o755)
    os.chmod(tmp_path / "state", 0o755)
    (tmp_path / "state" / "old").write_text("secret")
    os.chmod(tmp_path / "state" / "old", 0o644)
    with caplog.at_level(logging.WARNING, logger="grid_tasks.private_files"):
        private_dir(tmp_path / "state")
        private_file(tmp_path / "state" / "old")
    assert mode(tmp_path / "state") == 0o700
    assert mode(tmp_path / "state" / "old") == 0o600
    assert (tmp_path / "state" / "old").read_text() == "secret", "content kept"
    logged = caplog.text
    assert f"tightened {tmp_path / 'state'} from 755 to 700" in logged
    assert "from 644 to 600" in logged


def test_a_shared_sticky_folder_is_refused_not_closed(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    with pytest.raises(StateDirError, match="shared"):
        private_dir(shared)
    assert mode(shared) == 0o1777


def test_sqlite_database_wal_and_shm_are_0600(tmp_path: Path) -> None:
    database = tmp_path / "state" / "grid_tasks.db"
    with umask(0o022):
        engine = make_engine(f"sqlite:///{database}")
        with engine.begin() as conn:  # WAL and SHM exist while a connection is open
            conn.execute(text("CREATE TABLE env (k TEXT, v TEXT)"))
            conn.execute(text("INSERT INTO env VALUES ('API_KEY', 'hunter2')"))
            wal, shm = (database.with_name(database.name + s) for s in ("-wal", "-shm"))
            assert wal.exists() and shm.exists()
            modes = {p.name: mode(p) for p in (database, wal, shm)}
        engine.dispose()
    assert modes == {"grid_tasks.db": 0o600, "grid_tasks.db-wal": 0o600,
                     "grid_tasks.db-shm": 0o600}
    assert mode(database.parent) == 0o700


def test_an_existing_loose_database_and_wal_are_tightened(tmp_path: Path) -> None:
    database = tmp_path / "old.db"
    engine = make_engine(f"sqlite:///{database}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (x)"))
    engine.dispose()
    wal = database.with_name("old.db-wal")
    wal.touch()
    for path in (database, wal):
        os.chmod(path, 0o644)  # as an older version left them
    make_engine(f"sqlite:///{database}").dispose()
    assert mode(database) == mode(wal) == 0o600


def test_env_file_left_0644_by_an_older_version_is_rewritten_0600(tmp_path: Path) -> None:
    env_file = tmp_path / "stack" / "stack.env"
    env_file.parent.mkdir(mode=0o755)
    env_file.write_text("stale\n")
    os.chmod(env_file, 0o644)  # O_TRUNC alone keeps this mode
    write_env_file(env_file, Settings.from_env({}))
    assert mode(env_file) == 0o600 and mode(env_file.parent) == 0o700
    assert "GRID_TASKS_REDIS_URL=" in env_file.read_text()


def test_supervised_logs_and_scheduler_logs_are_0600(tmp_path: Path) -> None:
    with umask(0o022), Supervisor(tmp_path / "logs") as supervisor:
        child = supervisor.spawn("hello", [sys.executable, "-c", "print('hi')"])
        child.process.wait(10)
    assert mode(tmp_path / "logs") == 0o700 and mode(child.log_path) == 0o600
    with umask(0o022):
        log = RotatingLog(tmp_path / "maui" / "maui.log", max_bytes=64, depth=1)
        log.write("x" * 70 + "\n")  # rolls: the compressed generation too
        log.write("y\n")
        log.close()
    files = sorted((tmp_path / "maui").iterdir())
    assert [p.name for p in files] == ["maui.log", "maui.log.1.gz", "maui.log.lock"]
    assert {p.name: mode(p) for p in files} == dict.fromkeys((p.name for p in files), 0o600)


def test_embedded_redis_keeps_its_password_in_a_private_config(tmp_path: Path) -> None:
    with umask(0o022), RedisServer(tmp_path / "redis") as server:
        cmdline = Path(f"/proc/{server.pid}/cmdline").read_bytes()
        config = tmp_path / "redis" / "redis.conf"
        assert server.password.encode() not in cmdline
        assert server.password in config.read_text()
        assert mode(config) == mode(tmp_path / "redis" / "redis.log") == 0o600
        assert mode(tmp_path / "redis") == 0o700
