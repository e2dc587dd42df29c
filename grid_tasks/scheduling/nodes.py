"""Node changes noticed by watching the registry, for the changes no daemon announces.

A daemon triggers its RM's iteration itself when it registers, says goodbye
(Down) or beats again after its heartbeat had expired.  A node that just goes
silent announces nothing: its heartbeat key expires and it reads Unknown.
:func:`watch_nodes` (beat runs it per RM every heartbeat TTL, see
:mod:`grid_tasks.scheduling.tasks`) compares every registered node's state with
the last one it saw, kept in a Redis hash, and triggers the iteration when any
changed; the iteration then gives the lost node no work and hands its jobs to
the node failure policy (:mod:`grid_tasks.scheduling.recovery`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from grid_tasks.effects import KEY_PREFIX, trigger_iteration
from grid_tasks.maui.model import USABLE_STATES

log = logging.getLogger(__name__)


def seen_key(rm: str) -> str:
    """Hash node -> the state the last watch saw."""
    return f"{KEY_PREFIX}:{rm}:nodes"


@dataclass(frozen=True)
class NodeChange:
    """A node whose state differs from the last watch (``before`` None: first seen)."""

    node: str
    before: str | None
    after: str


def node_changes(registry: Any, rm: str) -> list[NodeChange]:
    """Registered nodes of ``rm`` whose state changed since the last call (and remember)."""
    client = registry.client
    # Beat runs this per RM every TTL: it reads the RM's own node set and their states
    # (one MGET of the heartbeats), never the grid's every node nor whole registrations.
    names = [(rm, node) for node in registry.node_names(rm)]
    # Idle/Busy/Running flip with every job: only usable vs Down/Unknown/... matters here.
    current = {node: ("Up" if state in USABLE_STATES else state.value)
               for (_, node), state in registry.states(names).items()}
    raw = client.hgetall(seen_key(rm))
    seen = {k.decode(): v.decode() for k, v in raw.items()}
    changes = [NodeChange(node, seen.get(node), state) for node, state in sorted(current.items())
               if seen.get(node) != state]
    if changes:
        client.hset(seen_key(rm), mapping={c.node: c.after for c in changes})
    return changes


def watch_nodes(app: Any, rm: str, registry: Any) -> list[NodeChange]:
    """Trigger ``rm``'s iteration if any of its nodes changed state; returns the changes."""
    changes = node_changes(registry, rm)
    for change in changes:
        log.info("rm %s: node %s %s -> %s", rm, change.node, change.before or "(new)",
                 change.after)
    if changes:
        trigger_iteration(app, rm, client=registry.client)
    return changes


__all__ = ["NodeChange", "node_changes", "seen_key", "watch_nodes"]
