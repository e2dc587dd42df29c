"""``grid-tasks nodes``: rich table and JSON of live, silent and never-seen nodes."""

from __future__ import annotations

import json
import time

from click.testing import CliRunner

from grid_tasks.cli import main
from grid_tasks.node.registry import NodeRegistry

RES = {"procs": 4, "memory_mb": 4096, "disk_mb": 1, "swap_mb": 1, "features": ["fast", "ib"],
       "attributes": {}}


def test_json_lists_every_topology_node_with_state(settings, grid_env):
    registry = NodeRegistry.from_url(settings.redis_url, settings.heartbeat_ttl)
    registry.register("rmA", "node1", RES, {"hostname": "h"}, "configured", time.time())
    registry.register("rmB", "node3", RES, {"hostname": "h"}, "configured", time.time())
    registry.mark_down("rmB", "node3", time.time())
    result = CliRunner().invoke(main, ["nodes", "--json"], env=grid_env)
    assert result.exit_code == 0, result.output
    rows = {(r["rm"], r["node"]): r for r in json.loads(result.stdout)}
    assert len(rows) == 4
    assert rows[("rmA", "node1")]["state"] == "Idle"
    assert rows[("rmA", "node1")]["last_heartbeat"] is not None
    assert rows[("rmB", "node3")]["state"] == "Down"
    assert rows[("rmA", "node2")]["state"] == "Unknown"
    assert rows[("rmA", "node2")]["last_heartbeat"] is None


def test_table_and_rm_filter(settings, grid_env):
    registry = NodeRegistry.from_url(settings.redis_url, settings.heartbeat_ttl)
    registry.register("rmA", "node2", RES, {}, "configured", time.time())
    result = CliRunner().invoke(main, ["nodes", "--rm", "rmA"], env=grid_env,
                                terminal_width=160)
    assert result.exit_code == 0, result.output
    assert "node2" in result.stdout and "Idle" in result.stdout and "node3" not in result.stdout
    assert "fast, ib" in result.stdout and "never" in result.stdout  # node1 never seen


def test_unknown_rm_and_unreachable_redis(grid_env):
    result = CliRunner().invoke(main, ["nodes", "--rm", "rmQ"], env=grid_env)
    assert result.exit_code == 1 and "unknown resource manager 'rmQ'" in result.stderr
    dead = {**grid_env, "GRID_TASKS_REDIS_URL": "redis://127.0.0.1:1/3"}
    result = CliRunner().invoke(main, ["nodes"], env=dead)
    assert result.exit_code == 1
    assert result.stderr.startswith("error: cannot reach Redis at 127.0.0.1:1")


def test_stack_option_without_a_running_stack(grid_env, tmp_path):
    result = CliRunner().invoke(main, ["nodes", "--stack", str(tmp_path)], env=grid_env)
    assert result.exit_code == 1
    assert "no running grid in" in result.stderr
