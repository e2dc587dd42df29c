"""One grid per state directory, and finding the running grid from any directory.

A running stack holds an exclusive ``flock`` on ``<state dir>/stack.lock`` for its
whole life.  The kernel drops the lock when the process dies, however it dies, so a
crashed grid never blocks the next one, and "is a grid running there?" is a lock
probe, not a guess from a ``stack.env`` a SIGKILL left behind.

So that commands run in another directory find the grid (as ``git`` finds ``.git``
wherever you are), a stack also leaves a record naming its state directory in a
per-user folder: ``$XDG_RUNTIME_DIR/grid_tasks`` when the session has one, else
``$XDG_STATE_HOME/grid_tasks/running`` (``~/.local/state/grid_tasks/running``).
Finding a grid reads; it creates no file and no folder.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from grid_tasks.errors import GridTasksError, NotFoundError
from grid_tasks.private_files import open_private, private_dir

LOCK_FILE = "stack.lock"
RECORD_SUFFIX = ".stack"


class StateDirInUse(GridTasksError):
    """Another running grid holds this state directory (one grid, one state)."""


class NoRunningGrid(NotFoundError):
    """No grid to talk to: none configured, none running that could be found."""


class StackLock:
    """The exclusive lock a running stack holds on its state directory."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or raise :class:`StateDirInUse` naming the holder's pid.

        The file is opened close-on-exec: children never hold it, so it ends with us."""
        private_dir(self.state_dir)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise StateDirInUse(
                f"state directory {self.state_dir} is in use by a running grid (pid "
                f"{holder}): stop that grid first, or give this one another --state-dir "
                f"(`grid-tasks demo` without --state-dir uses a fresh one)") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._fd is not None

    def release(self) -> None:
        """Let go (the file stays: unlinking it would let two holders lock two files)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        os.ftruncate(fd, 0)
        os.close(fd)  # closing drops the flock


def grid_running(state_dir: Path) -> bool:
    """Whether a live stack holds ``state_dir`` (a probe: the lock is not kept)."""
    try:
        fd = os.open(Path(state_dir) / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def records_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The per-user folder of running-grid records (see the module docstring)."""
    env = os.environ if environ is None else environ
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime) / "grid_tasks"
    state_home = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state_home) / "grid_tasks" / "running"


def _record_path(state_dir: Path, environ: Mapping[str, str] | None) -> Path:
    digest = hashlib.sha256(str(Path(state_dir).resolve()).encode()).hexdigest()[:16]
    return records_dir(environ) / (digest + RECORD_SUFFIX)


def announce(state_dir: Path, environ: Mapping[str, str] | None = None) -> Path:
    """Record a running stack's state directory where other shells look for it."""
    path = _record_path(state_dir, environ)
    private_dir(path.parent)
    with open_private(path) as out:
        out.write(f"{Path(state_dir).resolve()}\n")
    return path


def withdraw(state_dir: Path, environ: Mapping[str, str] | None = None) -> None:
    """Remove a stack's record (at its stop)."""
    _record_path(state_dir, environ).unlink(missing_ok=True)


def running_grids(environ: Mapping[str, str] | None = None) -> list[Path]:
    """State directories of the recorded grids that run now (stale records skipped:
    a grid killed by SIGKILL left its record, not its lock)."""
    folder = records_dir(environ)
    try:
        records = sorted(folder.glob("*" + RECORD_SUFFIX))
    except OSError:
        return []
    found = []
    for record in records:
        try:
            state_dir = Path(record.read_text().strip())
        except OSError:
            continue
        if grid_running(state_dir):
            found.append(state_dir)
    return found
