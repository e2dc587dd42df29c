"""Run attacks in order on one private grid, made for the purpose and torn down after.

As root (with useradd) the grid maps its user to a throwaway unprivileged account,
as a production grid's grid map would: a job then runs as that account, and the
node daemons, as root, hold what it must not reach.  Otherwise jobs run as the
invoking user (a one-user grid) and the root-only attacks are skipped.
"""

from __future__ import annotations

import datetime as dt
import getpass
import shutil
import tempfile
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path

from grid_tasks.faults.harness import FaultGrid
from grid_tasks.faults.runner import pick
from grid_tasks.security.role_keys import init_role_key, subject_of
from grid_tasks.security.roles import Role
from grid_tasks.selftest.account import can_make_accounts, throwaway_account
from grid_tasks.selftest.registry import ATTACKS
from grid_tasks.selftest.rows import Row
from grid_tasks.selftest.target import Target
from grid_tasks.selftest.weaken import check_names, weaken


def resolve(names: Sequence[str] | None) -> list[str]:
    """The attacks to run (all by default); ConfigError naming the unknown ones."""
    return pick(names, ATTACKS, "attack", "--attack")


def run_attacks(names: Sequence[str] | None = None, *, state_dir: Path | None = None,
                weakened: Sequence[str] = (), on_start: Callable[[str], None] | None = None,
                on_done: Callable[[Row], None] | None = None) -> list[Row]:
    """Run ``names`` (all by default) against one fresh grid under ``state_dir`` (a temp
    dir, removed after); ``weakened`` names deliberate faults (``weaken.WEAKENINGS``)
    applied first, to see the self-test catch them."""
    chosen = resolve(names)
    check_names(weakened)
    temp = state_dir is None
    base = Path(tempfile.mkdtemp(prefix="grid-tasks-security-")) if temp else Path(state_dir)
    rows: list[Row] = []
    with ExitStack() as stack:
        if temp:
            stack.callback(shutil.rmtree, base, True)
        work = Path(tempfile.mkdtemp(prefix="gt-selftest-work-", dir="/tmp"))
        stack.callback(shutil.rmtree, work, True)
        work.chmod(0o755)  # jobs may enter it, not write it
        mapped = can_make_accounts() and "jobs-as-root" not in weakened
        account = stack.enter_context(throwaway_account()).pw_name if mapped else None
        fg = FaultGrid(base / "grid", beats=("beat-a",), gridmap_file=_gridmap(base, account))
        stack.enter_context(fg)  # stopped before the account is removed
        weaken(fg, weakened)
        untrusted = init_role_key(base / "untrusted", Role.USER, "mallory",
                                  now=dt.datetime.now(dt.timezone.utc))
        target = Target(fg, work, untrusted, account)
        for name in chosen:
            if on_start:
                on_start(name)
            rows.append(ATTACKS[name]().run(target))
            if on_done:
                on_done(rows[-1])
    return rows


def _gridmap(base: Path, account: str | None) -> Path | None:
    """A grid map sending the grid's user (this process's user key) to ``account``."""
    if account is None:
        return None
    base.mkdir(parents=True, exist_ok=True)
    path = base / "grid-mapfile"
    path.write_text(f'"{subject_of(Role.USER, getpass.getuser())}" {account}\n')
    return path
