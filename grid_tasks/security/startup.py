"""Checks a daemon makes before it serves: settings that would make it unsafe.

Kept apart from :mod:`grid_tasks.security.accounts` (which parses grid maps with
lark): every node daemon imports this at start.
"""

from __future__ import annotations

import os

from grid_tasks.errors import ConfigError


def check_node_account(gridmap_file: object, single_user: bool,
                       euid: int | None = None) -> None:
    """Refuse to start a node daemon that would run every job as root.

    A job without a mapped account runs as the daemon itself; with no grid map no job
    has one.  So a root daemon needs a grid map, unless the operator declared a
    one-user grid (``GRID_TASKS_SINGLE_USER=1``, what the embedded stack does).
    """
    uid = os.geteuid() if euid is None else euid
    if uid == 0 and gridmap_file is None and not single_user:
        raise ConfigError(
            "a node daemon running as root needs a grid map (GRID_TASKS_GRIDMAP): without "
            "one every job would run as root; set GRID_TASKS_GRIDMAP to map users to "
            "unprivileged accounts, or run the daemon as the one user whose jobs it runs",
            source="environment", key="GRID_TASKS_GRIDMAP")
