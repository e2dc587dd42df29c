"""``grid-tasks query``: nodes of a topology file matching a MIL query.

(Lives under tests/mil because the CLI module only wraps the MIL package.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from grid_tasks.cli import main

GRID = """
[rm.alpha]
site = "north"

[rm.alpha.node.a1]
procs = 16
memory_mb = 65536
features = ["fast", "ib"]
arch = "x86_64"
os = "linux"

[rm.alpha.node.a2]
procs = 4
memory_mb = 8192
arch = "x86_64"
os = "linux"

[rm.beta.node.b1]
procs = 8
memory_mb = 16384
features = ["gpu"]
arch = "aarch64"
os = "linux"
gpus = 2
"""


@pytest.fixture()
def grid(tmp_path: Path) -> Path:
    path = tmp_path / "grid.toml"
    path.write_text(GRID, encoding="utf-8")
    return path


def run(*args: str, env: dict[str, str] | None = None, stdin: str | None = None):
    return CliRunner().invoke(main, ["query", *args], env=env, input=stdin)


def names(result) -> list[str]:
    return [node["name"] for node in json.loads(result.output)["matches"]]


@pytest.mark.parametrize("query, expected", [
    ("$procs >= 8", ["a1", "b1"]),
    ('match($features, "^gpu$")', ["b1"]),
    ('$arch == "x86_64" and $memory < 10000', ["a2"]),
    ("$gpus > 0", ["b1"]),
    ("not ($gpus > 0)", []),  # nodes without $gpus are UNKNOWN, not matches
    ('$site == "north" or $rm == "beta"', ["a1", "a2", "b1"]),
    ("false", []),
])
def test_json_lists_matching_nodes(grid: Path, query: str, expected: list[str]) -> None:
    result = run(query, "--json", "--grid", str(grid))
    assert result.exit_code == 0, result.output
    assert names(result) == expected
    payload = json.loads(result.output)
    assert payload["total"] == 3 and payload["count"] == len(expected)


def test_json_carries_node_attributes(grid: Path) -> None:
    node = json.loads(run("$gpus == 2", "--json", "--grid", str(grid)).output)["matches"][0]
    assert node == {"name": "b1", "rm": "beta", "procs": 8, "memory": 16384, "disk": 0,
                    "swap": 0, "features": ["gpu"], "arch": "aarch64", "os": "linux",
                    "gpus": 2}


def test_table_output(grid: Path) -> None:
    result = run('match($features, "ib")', "--grid", str(grid))
    assert result.exit_code == 0, result.output
    assert "a1" in result.output and "b1" not in result.output
    assert "1 of 3 nodes match" in result.output


def test_topology_from_environment_and_query_from_stdin(grid: Path) -> None:
    result = run("-", "--json", env={"GRID_TASKS_TOPOLOGY": str(grid)}, stdin="$procs == 4\n")
    assert result.exit_code == 0, result.output
    assert names(result) == ["a2"]


def test_bad_query_shows_caret_and_exits_1(grid: Path) -> None:
    result = run("$procs >= 8 and", "--grid", str(grid))
    assert result.exit_code == 1
    assert "error:" in result.output and "end of query" in result.output
    assert "               ^" in result.output


def test_bad_query_as_json(grid: Path) -> None:
    result = run('"x" + 1 > 2', "--json", "--grid", str(grid))
    assert result.exit_code == 1
    error = json.loads(result.output)["error"]
    assert error["type"] == "MILError" and (error["line"], error["column"]) == (1, 1)
    assert "needs numbers" in error["message"]


def test_missing_topology_is_a_clear_error(tmp_path: Path) -> None:
    result = run("true", "--grid", str(tmp_path / "absent.toml"))
    assert result.exit_code == 1
    assert "topology file not found" in result.output
