"""A throwaway unprivileged account for the duration of a self-test (root only)."""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from grid_tasks.errors import GridTasksError


class AccountSetupError(GridTasksError):
    """useradd or userdel failed."""


def can_make_accounts() -> bool:
    """Root with useradd and userdel: the jobs of the self-test can run unprivileged."""
    return os.geteuid() == 0 and all(shutil.which(t) for t in ("useradd", "userdel"))


@contextmanager
def throwaway_account(prefix: str = "gtself") -> Iterator[pwd.struct_passwd]:
    """A system account with no home and no shell, removed afterwards (even on error)."""
    name = f"{prefix}{secrets.token_hex(4)}"
    made = subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir",
                           "/nonexistent", "--shell", "/usr/sbin/nologin", "--user-group", name],
                          capture_output=True, text=True)
    if made.returncode != 0:
        raise AccountSetupError(f"useradd {name} failed: {made.stderr.strip()}")
    try:
        yield pwd.getpwnam(name)
    finally:
        gone = subprocess.run(["userdel", name], capture_output=True, text=True)
        if gone.returncode != 0:
            raise AccountSetupError(f"userdel {name} failed: {gone.stderr.strip()}")
