"""Secrets at rest (issue 20, finding 4): the grid's state folder is its owner's only,
the SQLite database and its WAL are 0600, private keys are 0600."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import TYPE_CHECKING

from grid_tasks.selftest.rows import Attack

if TYPE_CHECKING:
    from grid_tasks.selftest.target import Target


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def expected_modes(state_dir: Path) -> dict[Path, int]:
    """Each file or folder that must be private, and its mode (what exists of them)."""
    wanted: dict[Path, int] = {state_dir: 0o700, state_dir / "keys": 0o700}
    for name in ("grid_tasks.db", "grid_tasks.db-wal", "grid_tasks.db-shm"):
        wanted[state_dir / name] = 0o600
    wanted.update({key: 0o600 for key in sorted((state_dir / "keys").glob("*.key"))})
    return {path: mode for path, mode in wanted.items() if path.exists()}


class FileModes(Attack):
    name = "file-modes"
    expected = "state dir and keys dir 0700; SQLite db/-wal and private keys 0600"

    def perform(self, target: "Target") -> tuple[bool, str]:
        base = target.fg.state_dir
        wanted = expected_modes(base)
        if base / "grid_tasks.db" not in wanted or not any(p.suffix == ".key" for p in wanted):
            return False, "the database or the private keys are not where expected"
        wrong = [f"{p.relative_to(base.parent)} is {_mode(p):o} (want {m:o})"
                 for p, m in wanted.items() if _mode(p) & ~m]
        if wrong:
            return False, "; ".join(wrong)
        return True, f"{len(wanted)} paths checked, none open to group or others"
