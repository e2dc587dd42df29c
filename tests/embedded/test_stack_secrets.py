"""A real embedded stack with Flower, attacked by a real unprivileged local account.

Issue 20, finding 4: the SQLite file and WAL were 0644 (another user read jobs'
environments and DUROC per-job Redis passwords) and Flower's basic-auth password
was on its world-readable command line (``nobody`` used it to shut a worker down).
"""

from __future__ import annotations

import base64
import logging
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from grid_tasks import db
from grid_tasks.embedded.stack import ENV_FILE, EmbeddedStack
from tests.metrics.flower_live import flower_stack

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                       reason="needs root and useradd (a real unprivileged account)"),
]


def _status(url: str, auth: str | None = None) -> int:
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status
    except urllib.error.HTTPError as err:
        return err.code


def _as_user(user: pwd.struct_passwd, *argv: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(list(argv), user=user.pw_uid, group=user.pw_gid, extra_groups=[],
                          capture_output=True, timeout=10, cwd="/")


@pytest.fixture
def open_parent() -> Iterator[Path]:
    """A folder every local account may traverse (pytest's own tmp folders are 0700,
    which would hide a 0644 database from the attacker for the wrong reason)."""
    parent = Path(tempfile.mkdtemp(prefix="grid-tasks-secrets-"))
    os.chmod(parent, 0o755)
    try:
        yield parent
    finally:
        shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture
def stack(open_parent: Path, caplog: pytest.LogCaptureFixture) -> Iterator[EmbeddedStack]:
    state = open_parent / "grid"
    state.mkdir()
    os.chmod(state, 0o755)  # as an older version left it
    (state / ENV_FILE).write_text("stale\n")
    os.chmod(state / ENV_FILE, 0o644)
    with caplog.at_level(logging.WARNING, logger="grid_tasks.private_files"), \
            flower_stack(state) as stack:
        yield stack


def _state_files(state: Path) -> list[Path]:
    database = state / "grid_tasks.db"
    files = [database, database.with_name("grid_tasks.db-wal"), state / ENV_FILE,
             state / "flower.password", state / "redis" / "redis.conf",
             state / "redis" / "redis.log", *sorted((state / "logs").glob("*.log"))]
    for path in files:
        assert path.exists(), path
    return files


def test_state_is_private_and_flowers_password_stays_off_command_lines(
        stack: EmbeddedStack, throwaway_user: pwd.struct_passwd,
        caplog: pytest.LogCaptureFixture) -> None:
    state = stack.state_dir
    logged = [r.getMessage() for r in caplog.get_records("setup")]  # start(): fixture
    assert any(m.startswith(f"tightened {state} from 755 to 700") for m in logged), logged
    folders = [state, state / "logs", state / "redis"]
    # SQLite removes the WAL when its last connection closes: hold one open, as any
    # busy grid does, so the WAL is there to be checked
    with db.get_engine(stack.settings.database_url).connect() as conn:
        conn.exec_driver_sql("SELECT count(*) FROM jobs").scalar()
        files = _state_files(state)
        assert {p: stat.S_IMODE(p.stat().st_mode) for p in folders} == \
            dict.fromkeys(folders, 0o700)
        assert {p: stat.S_IMODE(p.stat().st_mode) for p in files} == \
            dict.fromkeys(files, 0o600)
        for path in files:  # the attacker: a real local account, not root
            seen = _as_user(throwaway_user, "cat", str(path))
            assert seen.returncode != 0 and b"Permission denied" in seen.stderr, \
                f"{throwaway_user.pw_name} read {path} ({len(seen.stdout)} bytes)"

    user, password = stack.flower_auth.split(":", 1)
    assert stack.flower_password_file == state / "flower.password"
    assert stack.flower_password_file.read_text().strip() == password
    flower = next(c for c in stack.supervisor.children if c.name == "flower")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue  # gone meanwhile
        assert password.encode() not in cmdline, f"pid {pid}: {cmdline!r}"
        assert stack.redis.password.encode() not in cmdline, f"pid {pid}: {cmdline!r}"
    environ = _as_user(throwaway_user, "cat", f"/proc/{flower.pid}/environ")
    assert environ.returncode != 0 and password.encode() not in environ.stdout

    api = stack.flower_url + "api/workers"
    assert _status(api) == 401
    assert _status(api, f"{user}:{password}x") == 401
    assert _status(api, f"{user}:{password}") == 200
