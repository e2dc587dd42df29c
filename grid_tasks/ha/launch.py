"""Command lines for running HA beats as child processes (e.g. from ``grid-tasks up``)."""

from __future__ import annotations

import sys


def beat_commands(count: int = 2, *, lease: float | None = None, poll: float | None = None,
                  loglevel: str = "INFO", check: bool = False) -> list[tuple[str, list[str]]]:
    """``count`` (name, argv) pairs running ``grid-tasks beat`` with this interpreter.

    Spawn each with the grid's ``GRID_TASKS_*`` environment; the first to start
    leads, the others stand by.  Do not also embed a beat in a worker.
    """
    boot = "import sys; from grid_tasks.cli import main; sys.exit(main(prog_name='grid-tasks'))"
    found = []
    for i in range(count):
        name = f"beat-{chr(ord('a') + i)}"
        argv = [sys.executable, "-c", boot, "beat", "--name", name, "-l", loglevel,
                "--check" if check else "--no-check"]
        if lease is not None:
            argv += ["--lease", repr(float(lease))]
        if poll is not None:
            argv += ["--poll", repr(float(poll))]
        found.append((name, argv))
    return found
