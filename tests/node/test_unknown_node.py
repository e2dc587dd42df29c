"""A plain ``celery worker`` for a node the topology lacks is refused before it
registers: no phantom node Down in the listings forever (issue 23)."""

from __future__ import annotations

import subprocess
import sys

from grid_tasks.node.daemon import EX_CONFIG
from grid_tasks.node.registry import NodeRegistry


def test_plain_celery_worker_for_an_unknown_node_exits_before_registering(grid_env,
                                                                          settings):
    env = {**grid_env, "GRID_TASKS_RM": "rmA", "GRID_TASKS_NODE": "node9"}
    proc = subprocess.run([sys.executable, "-m", "celery", "-A", "grid_tasks.celery_app",
                           "worker", "-P", "solo", "-l", "INFO"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == EX_CONFIG, proc.stderr[-2000:]
    assert "node daemon rmA/node9 refused to start" in proc.stderr
    assert "unknown node 'node9' in resource manager 'rmA' (known: node1, node2)" \
        in proc.stderr
    assert "ready" not in proc.stderr
    registry = NodeRegistry.from_settings(settings)
    assert [s.node for s in registry.list_nodes() if s.node == "node9"] == []
    assert registry.client.keys("*node9*") == []
