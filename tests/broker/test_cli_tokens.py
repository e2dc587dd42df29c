"""``grid-tasks tokens``: list, show, release and scan against a real Redis."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from grid_tasks.cli import main
from grid_tasks.legion.tokens import Claim, TokenStore
from tests.broker.conftest import TOKENS_DB

T0 = 1_700_000_000.0


@pytest.fixture
def cli(store: TokenStore, redis_server):
    env = {"GRID_TASKS_REDIS_URL": redis_server.url(TOKENS_DB)}

    def run(*args: str):
        return CliRunner().invoke(main, ["tokens", *args, "--prefix", store.prefix], env=env)

    return run


@pytest.fixture
def held(store: TokenStore):
    store.set_capacities({"rmA/node1": 4, "rmB/node3": 2})
    job = store.confirm(store.take([Claim("rmA/node1", T0, T0 + 60, 2),
                                    Claim("rmB/node3", T0, T0 + 60, 2)], "b1"), "job-9")
    loose = store.take([Claim("rmA/node1", T0, T0 + 30, 1)], "b2")
    return job, loose


def test_list_json_and_filters(cli, held) -> None:
    job, loose = held
    result = cli("list", "--json")
    assert result.exit_code == 0, result.output
    listed = json.loads(result.output)
    assert {t["id"] for t in listed} == {t.id for t in job + loose}
    only = json.loads(cli("list", "--owner", "job-9", "--resource", "rmB/node3",
                          "--json").output)
    assert [t["id"] for t in only] == [job[1].id] and only[0]["confirmed"]


def test_list_table(cli, held) -> None:
    result = cli("list")
    assert result.exit_code == 0, result.output
    assert "rmA/node1" in result.output and "confirmed" in result.output
    assert "s left" in result.output and "3 tokens" in result.output


def test_show_and_release(cli, held, store: TokenStore) -> None:
    _, [loose] = held
    result = cli("show", loose.id, "--json")
    assert result.exit_code == 0, (result.output, loose.id)
    shown = json.loads(result.output)
    assert shown["owner"] == "b2" and shown["status"].endswith("s left")
    released = json.loads(cli("release", loose.id, "nosuch", "--json").output)
    assert released == {"requested": 2, "released": 1}
    assert store.get(loose.id) is None
    missing = cli("show", loose.id)
    assert missing.exit_code == 1 and "no token" in missing.output


def test_scan_reports_ok_and_problems(cli, held, store: TokenStore) -> None:
    result = cli("scan", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["ok"] and report["peaks"] == {"rmA/node1": 3, "rmB/node3": 2}
    # an operator shrinks a node below what is already reserved on it
    store.set_capacities({"rmB/node3": 1})
    bad = cli("scan")
    assert bad.exit_code == 1 and "PROBLEMS" in bad.output and "rmB/node3" in bad.output
    # and releasing one token of a confirmed job leaves it broken: reported
    job, _ = held
    store.release([job[0]])
    broken = json.loads(cli("scan", "--json").output)
    assert broken["broken_groups"] == [["job-9", 1, 2]]


def test_unreachable_redis_is_a_clear_error(store: TokenStore) -> None:
    result = CliRunner().invoke(main, ["tokens", "list"],
                                env={"GRID_TASKS_REDIS_URL": "redis://127.0.0.1:1/0"})
    assert result.exit_code == 1 and "cannot reach Redis" in result.output
