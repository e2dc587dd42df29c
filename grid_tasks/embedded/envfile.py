"""The ``stack.env`` file of a running ``grid-tasks up``: its settings as KEY=VALUE lines.

Kept apart from :mod:`grid_tasks.embedded.stack` (which starts the whole stack and
imports most of the package) so the operator commands that only look for a running
grid (``showq``, ``showstart``, ``nodes``) do not pay for importing it.
"""

from __future__ import annotations

from pathlib import Path

from grid_tasks.private_files import open_private, private_dir
from grid_tasks.settings import Settings

#: While a stack runs, its settings as KEY=VALUE lines (mode 0600) in its state dir,
#: so ``grid-tasks nodes`` in another shell can find it.
ENV_FILE = "stack.env"


def write_env_file(path: Path, settings: Settings) -> None:
    """The settings (Redis URLs with their password) as a 0600 file in a 0700 folder,
    also when an older version left the file 0644 (O_TRUNC keeps a file's mode)."""
    private_dir(path.parent)
    with open_private(path) as out:
        out.writelines(f"{k}={v}\n" for k, v in settings.to_env().items())


def read_env_file(path: Path) -> Settings | None:
    """The settings of the stack running in ``path``'s directory, or None if none runs."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return None
    env = dict(line.split("=", 1) for line in lines if "=" in line)
    return Settings.from_env(env)
