"""``grid-tasks query`` on the live collection: registry state and access rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from grid_tasks.cli import main
from grid_tasks.node.registry import NodeRegistry
from grid_tasks.settings import Settings

GRID = """
[rm.open.node.o1]
procs = 8
[rm.open.node.o2]
procs = 4

[rm.lab]
allow_users = "alice"
[rm.lab.node.l1]
procs = 16
"""


@pytest.fixture
def live(settings: Settings, tmp_path: Path):
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    registry = NodeRegistry.from_url(settings.redis_url, ttl=30)
    registry.register("open", "o1", {"procs": 8}, {"hostname": "o1.example"}, "configured", 1.0)
    registry.register("lab", "l1", {"procs": 16}, {}, "configured", 1.0)
    registry.client.close()
    env = {"GRID_TASKS_REDIS_URL": settings.redis_url, "GRID_TASKS_TOPOLOGY": str(grid)}

    def run(*args: str, extra: dict[str, str] | None = None):
        return CliRunner().invoke(main, ["query", *args], env={**env, **(extra or {})})

    return run


def matches(result) -> list[str]:
    assert result.exit_code == 0, result.output
    return [m["name"] for m in json.loads(result.output)["matches"]]


def test_live_attributes_are_queryable(live) -> None:
    result = live("$alive", "--json", "--user", "alice")
    assert matches(result) == ["o1", "l1"]
    payload = json.loads(result.output)
    assert payload["source"] == "live" and payload["matches"][0]["host"] == "o1.example"
    assert matches(live('$state == "Unknown"', "--json", "--user", "alice")) == ["o2"]


def test_access_rules_hide_resources_from_other_users(live) -> None:
    result = live("$procs > 0", "--json", "--user", "bob", "--group", "users",
                  "--host", "ws1")
    assert matches(result) == ["o1", "o2"]
    assert json.loads(result.output)["hidden"] == 1
    table = live("$procs > 0", "--user", "bob", "--group", "users", "--host", "ws1")
    assert "1 not open to you" in table.output and "Idle" in table.output


def test_rm_kind_and_topology_source(live) -> None:
    rms = json.loads(live("$procs >= 12", "--kind", "rm", "--json", "--user", "alice").output)
    assert [(m["name"], m["alive_nodes"]) for m in rms["matches"]] == [("open", 1), ("lab", 1)]
    static = live("$procs > 0", "--source", "topology", "--json", "--user", "alice")
    assert json.loads(static.output)["source"] == "topology"
    assert "state" not in json.loads(static.output)["matches"][0]


def test_live_source_without_a_reachable_grid_is_a_clear_error(live) -> None:
    result = live("true", "--source", "live", extra={"GRID_TASKS_REDIS_URL":
                                                     "redis://127.0.0.1:1/0"})
    assert result.exit_code == 1 and "cannot reach Redis" in result.output
    fallback = live("true", "--json", extra={"GRID_TASKS_REDIS_URL": "redis://127.0.0.1:1/0"})
    assert json.loads(fallback.output)["source"] == "topology"
