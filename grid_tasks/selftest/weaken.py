"""Deliberate weaknesses for a private grid: proof that the self-test catches them.

A checker that never fails proves nothing; ``selftest --security --weaken NAME`` (and
the self-test's own tests) breaks one thing on purpose and expects rows to say MISS.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence

from grid_tasks.errors import ConfigError
from grid_tasks.faults.harness import FaultGrid
from grid_tasks.node.registry import NodeRegistry

WEAKENINGS = {
    "unsigned-node": "node1 of rmA restarted with GRID_TASKS_SIGNING=0 (accepts unsigned "
                     "messages)",
    "user-as-scheduler": "the user's certificate also trusted as a scheduler's (copied into "
                         "certs/scheduler/), node1 restarted to load it",
    "jobs-as-root": "no grid map on a root grid (GRID_TASKS_SINGLE_USER=1): jobs run as "
                    "the root daemons' own account (applied when the grid starts)",
}


def check_names(names: Sequence[str]) -> None:
    """ConfigError naming the weaknesses not in :data:`WEAKENINGS` (before a grid starts)."""
    unknown = [n for n in names if n not in WEAKENINGS]
    if unknown:
        raise ConfigError(f"unknown weakening(s) {', '.join(unknown)}; known: "
                          f"{', '.join(WEAKENINGS)}", source="--weaken")


def weaken(fg: FaultGrid, names: Sequence[str]) -> None:
    """Apply the weaknesses ``names`` (of :data:`WEAKENINGS`) to the running grid ``fg``;
    node1 is restarted once, with all of them."""
    check_names(names)
    env: dict[str, str] = {}
    if not {"unsigned-node", "user-as-scheduler"} & set(names):
        return  # jobs-as-root is the grid's construction (runner), nothing to restart
    if "unsigned-node" in names:
        env["GRID_TASKS_SIGNING"] = "0"
    if "user-as-scheduler" in names:
        assert fg.keys is not None
        shutil.copy(fg.keys.user.cert, fg.keys.user.cert_store / "scheduler" / "weakened.pem")
    _restart_node1(fg, env)


def _restart_node1(fg: FaultGrid, env: dict[str, str]) -> None:
    """Kill node1 and start it again with ``env``; back once it beats again."""
    assert fg.settings is not None
    fg.kill_node("node1")
    registry = NodeRegistry.from_url(fg.settings.redis_url, fg.settings.heartbeat_ttl)
    registry.mark_down("rmA", "node1", time.time())  # so the wait is for the new daemon
    fg.start_node("rmA", "node1", **env)
