"""Flower's basic-auth password: from a file, handed over in the environment, never argv.

A process's command line is world-readable (``/proc/<pid>/cmdline``): a password
there let any local account log into Flower and shut workers down through its API.
Flower reads every option from ``FLOWER_<OPTION>`` variables too
(``flower/command.py`` ``apply_env_options``), and a process's environment is
readable only by its own uid and root, so the password goes in
``FLOWER_BASIC_AUTH`` of the Flower child alone.

Where it comes from: the file named by ``FLOWER_PASSWORD_FILE`` (the operator's),
else ``<state dir>/flower.password``, made 0600 with a generated password on first
use and kept across restarts (a browser's saved login keeps working).  ``grid-tasks
up`` prints the file's path, never the password: its terminal output is often a
shared log.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Mapping
from pathlib import Path

from grid_tasks.errors import ConfigError
from grid_tasks.private_files import open_private

FLOWER_USER = "admin"
PASSWORD_FILE = "flower.password"
PASSWORD_FILE_VAR = "FLOWER_PASSWORD_FILE"
#: Flower splits a multiple option's value at commas: a password may not hold one.
_FORBIDDEN = ","


def flower_password(state_dir: Path, environ: Mapping[str, str] | None = None) -> \
        tuple[str, Path]:
    """The password and the file it was read from (or written to, when new)."""
    env = os.environ if environ is None else environ
    chosen = env.get(PASSWORD_FILE_VAR)
    if chosen:
        path = Path(chosen).expanduser()
        return _read(path, PASSWORD_FILE_VAR), path
    path = Path(state_dir) / PASSWORD_FILE
    if path.exists():
        return _read(path, str(path)), path
    password = secrets.token_urlsafe(16)
    with open_private(path) as out:
        out.write(password + "\n")
    return password, path


def _read(path: Path, where: str) -> str:
    try:
        password = path.read_text().strip()
    except OSError as exc:
        raise ConfigError(f"cannot read Flower's password file {path}: {exc.strerror}",
                          source=where) from None
    if not password or _FORBIDDEN in password:
        raise ConfigError(f"Flower's password file {path} is empty or holds a comma "
                          "(Flower would split the password there)", source=where)
    return password


def flower_argv(port: int, db: Path) -> list[str]:
    """``celery flower`` on 127.0.0.1:``port``: no secret in it (see :func:`flower_env`)."""
    return [sys.executable, "-m", "celery", "-A", "grid_tasks.embedded.flower_app", "flower",
            f"--port={port}", "--address=127.0.0.1", f"--db={db}"]


def flower_env(auth: str) -> dict[str, str]:
    """What the Flower child's environment adds: its basic-auth ``user:password``."""
    return {"FLOWER_BASIC_AUTH": auth}
