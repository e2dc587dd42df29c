"""``grid-tasks keys`` and ``grid-tasks gridmap``."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from click.testing import CliRunner

from grid_tasks.cli import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "config" / "grid-mapfile.example"
DEMO = REPO / "config" / "demo-grid.toml"
ALICE = "/O=Grid/OU=Physics/CN=Alice Smith"


def run(*args: str, env: dict[str, str] | None = None):
    clean = {k: None for k in os.environ if k.startswith("GRID_TASKS_")}
    return CliRunner().invoke(main, list(args), env={**clean, **(env or {})})


def test_keys_init_show_and_trust(tmp_path):
    made = run("keys", "init", str(tmp_path / "a"), "--name", "host-a", "--key-size", "2048",
               "--json")
    assert made.exit_code == 0, made.output
    paths = json.loads(made.output)
    assert stat.S_IMODE(Path(paths["key"]).stat().st_mode) == 0o600
    assert paths["env"]["GRID_TASKS_SIGNING"] == "1"
    again = run("keys", "init", str(tmp_path / "a"), "--key-size", "2048")
    assert again.exit_code == 1 and "already exists" in again.output

    run("keys", "init", str(tmp_path / "b"), "--name", "host-b", "--key-size", "2048")
    trusted = run("keys", "trust", str(tmp_path / "b" / "worker.pem"),
                  "--store", paths["cert_store"])
    assert trusted.exit_code == 0, trusted.output
    shown = run("keys", "show", str(tmp_path / "a"), "--json")
    assert shown.exit_code == 0, shown.output
    info = json.loads(shown.output)
    assert "CN=host-a" in info["certificate"]["subject"]
    assert sorted(c["subject"].split("CN=")[1].split(",")[0] for c in info["trusted"]) == \
        ["host-a", "host-b"]
    table = run("keys", "show", str(tmp_path / "a"))
    assert table.exit_code == 0 and "trusted" in table.output


def test_keys_default_directory_is_in_the_state_dir(tmp_path):
    env = {"GRID_TASKS_STATE_DIR": str(tmp_path / "state")}
    made = run("keys", "init", "--key-size", "2048", env=env)
    assert made.exit_code == 0, made.output
    assert (tmp_path / "state" / "keys" / "certs" / "worker.pem").is_file()
    assert "export GRID_TASKS_SIGNING=1" in made.output


def test_keys_show_without_keys_is_a_clear_error(tmp_path):
    result = run("keys", "show", str(tmp_path))
    assert result.exit_code == 1 and result.output.startswith("error: ")
    assert "worker.pem" in result.output and "Traceback" not in result.output


def test_gridmap_check_lists_and_warns(tmp_path):
    ok = run("gridmap", "check", str(EXAMPLE), "--grid", str(DEMO), "--json")
    assert ok.exit_code == 0, ok.output
    data = json.loads(ok.output)
    assert data["ok"] and data["warnings"] == []
    assert {"identity": ALICE, "accounts": ["asmith"], "rm": "rmB", "line": 24} in \
        data["entries"]
    typo = tmp_path / "gm"
    typo.write_text(EXAMPLE.read_text().replace("[rmB]", "[rmZ]"))
    warned = run("gridmap", "check", str(typo), "--grid", str(DEMO))
    assert warned.exit_code == 0 and "section [rmZ]" in warned.output


def test_gridmap_check_reports_line_and_column(tmp_path):
    bad = tmp_path / "gm"
    bad.write_text('"/CN=ok" ok\n"/CN=broken" alice bob\n')
    shown = run("gridmap", "check", str(bad))
    assert shown.exit_code == 1
    assert f"{bad}:2:20:" in shown.output and "^" in shown.output
    as_json = run("gridmap", "check", str(bad), "--json")
    assert as_json.exit_code == 1
    err = json.loads(as_json.output)["error"]
    assert (err["line"], err["column"], err["type"]) == (2, 20, "GridMapError")


def test_gridmap_lookup(tmp_path):
    found = run("gridmap", "lookup", ALICE, "--rm", "rmA", "--file", str(EXAMPLE), "--json")
    assert found.exit_code == 0, found.output
    assert json.loads(found.output)["account"] == "alice"
    other = run("gridmap", "lookup", ALICE, "--rm", "rmA", "--account", "physics",
                env={"GRID_TASKS_GRIDMAP": str(EXAMPLE)})
    assert other.exit_code == 0 and "-> physics on rmA" in other.output
    refused = run("gridmap", "lookup", "/CN=Mallory", "--rm", "rmA", "--file", str(EXAMPLE))
    assert refused.exit_code == 1 and "not in the grid map" in refused.output
    nofile = run("gridmap", "lookup", ALICE, "--rm", "rmA")
    assert nofile.exit_code == 1 and "GRID_TASKS_GRIDMAP" in nofile.output
