"""State files readable by their owner only: 0700 folders, 0600 files.

The state directory holds what another local user must never read: the SQLite
database and its WAL (jobs' environments, DUROC per-job Redis passwords), the
embedded stack's env file (Redis URLs with their password), Flower's password,
logs.  Every creator goes through here so the mode does not depend on the umask
(``os.open``/``mkdir`` with an explicit mode, then a chmod for what already
existed): a state dir left 0755 by an older version is tightened at the next
start, with a log line naming it.  Standard library only: the pure core and
the job runtime may import it without cost.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import IO

from grid_tasks.errors import ConfigError

log = logging.getLogger(__name__)

class StateDirError(ConfigError):
    """A state folder that cannot be made private to its owner."""


DIR_MODE = 0o700
FILE_MODE = 0o600


def _tighten(path: Path, mode: int, *, fd: int | None = None) -> None:
    """chmod ``path`` (or ``fd``) to ``mode`` if it grants anything to group or others.

    Only what we own: root's chmod would succeed on anybody's file, and a shared
    directory handed to us (e.g. ``/tmp``) is not ours to close."""
    info = os.fstat(fd) if fd is not None else path.stat()
    if not info.st_mode & 0o077:
        return
    if info.st_uid != os.geteuid():
        log.warning("%s (mode %o) belongs to uid %d, not us: left as it is",
                    path, stat.S_IMODE(info.st_mode), info.st_uid)
        return
    if fd is not None:
        os.fchmod(fd, mode)
    else:
        path.chmod(mode)
    log.warning("tightened %s from %o to %o (state files are private to their owner)",
                path, stat.S_IMODE(info.st_mode), mode)


def missing_dirs_private(path: Path | str) -> Path:
    """``path`` as a directory, its missing parts (and itself) made 0700; existing
    folders are left as they are (a database or log folder an operator chose, or a
    shared one like ``/tmp``, is not ours to close)."""
    path = Path(path).expanduser()
    missing = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=DIR_MODE)
        except FileExistsError:  # made meanwhile by a sibling process
            continue
        os.chmod(folder, DIR_MODE)  # mkdir's mode is cut by the umask; ours must not be
    return path


def private_dir(path: Path | str) -> Path:
    """``path`` as a directory of mode 0700: made so (with any missing parents, also
    0700) or tightened if it exists with group or other access (a sticky, shared
    folder such as ``/tmp`` is refused instead: its users' files are not ours)."""
    path = missing_dirs_private(path)
    if path.stat().st_mode & stat.S_ISVTX:
        raise StateDirError(f"{path} is a shared (sticky) folder: state files need a "
                            "private folder of their own (e.g. a subfolder)",
                            source=str(path), key="GRID_TASKS_STATE_DIR")
    _tighten(path, DIR_MODE)
    return path


def private_file(path: Path | str) -> Path:
    """``path`` as a file of mode 0600: created empty so (before any program that
    would create it with its own mode), or tightened if it exists looser."""
    path = Path(path).expanduser()
    try:  # O_EXCL: an existing file is only chmodded (it may be open read-only elsewhere)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
        os.chmod(path, FILE_MODE)  # the umask may have cut it further: exactly 0600
    except FileExistsError:
        _tighten(path, FILE_MODE)
    return path


def open_private(path: Path | str, mode: str = "w") -> IO[str]:
    """Open ``path`` for writing (``"w"``, ``"a"``, ``"wb"``, ``"ab"``) as a 0600 file,
    whatever the umask and whatever mode an existing file had."""
    path = Path(path).expanduser()
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if "a" in mode else os.O_TRUNC)
    fd = os.open(path, flags, FILE_MODE)
    try:
        _tighten(path, FILE_MODE, fd=fd)
        return os.fdopen(fd, mode)
    except BaseException:
        os.close(fd)
        raise


def private_sqlite(database: Path | str) -> None:
    """A SQLite file and its ``-wal``/``-shm`` made 0600 before SQLite opens them.

    SQLite creates the WAL and shared-memory files with the main file's permissions
    (``findCreateFileMode``), so a 0600 database keeps new ones private; existing
    ones from an older version are tightened here."""
    database = Path(database).expanduser()
    private_file(database)
    for suffix in ("-wal", "-shm", "-journal"):
        companion = database.with_name(database.name + suffix)
        if companion.exists():
            _tighten(companion, FILE_MODE)
