"""showstats (--by-rm, --history, --plot) and diagnose -n/-r/-f through the real CLI."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from grid_tasks.db import Reservation, ReservationKind, get_engine, session_factory
from grid_tasks.node.registry import NodeRegistry
from grid_tasks.states import JobState, MauiJobState
from tests.cli.test_ops_cli import offline, ops, run  # noqa: F401


def _accounted(insert, now, rm, user, procs):
    return insert(accounted=True, rm=rm, user=user, state=JobState.DONE, tasks=procs,
                  procs=procs, walltime=600, start_time=now - timedelta(minutes=4),
                  end_time=now - timedelta(minutes=2), exit_code=0,
                  maui_state=MauiJobState.COMPLETED)


def test_showstats_by_rm_history_and_plot(ops, tmp_path):  # noqa: F811
    env, insert, _, now = ops
    env = offline(env)
    _accounted(insert, now, "rmA", "alice", 4)
    _accounted(insert, now, "rmB", "bob", 1)
    by_rm = json.loads(run(env, "showstats", "--by-rm", "--json").stdout)
    assert {r["key"]: r["jobs"] for r in by_rm["rows"]} == {"rmA": 1, "rmB": 1}
    history = json.loads(run(env, "showstats", "--history", "week", "--by-rm",
                             "--json").stdout)
    assert history["period"] == "week" and len(history["periods"]) == 8
    assert history["capacity"] == {"rmA": 8, "rmB": 4}
    periods = history["periods"]  # summed: the jobs may straddle a week's start
    assert sum(p["total"]["jobs"] for p in periods) == 2
    assert sum(p["total"]["proc_hours"] for p in periods) == pytest.approx(5 * 120 / 3600,
                                                                          abs=1e-3)
    rows = [r for p in periods for r in p["rows"]]
    assert {r["key"] for r in rows} == {"rmA", "rmB"}
    assert all(r["utilization"] is not None for r in rows)
    table = run(env, "showstats", "--history", "day", "-u").stdout
    assert "statistics per day" in table and "alice" in table and "TOTAL" in table
    png = tmp_path / "usage.png"
    plotted = run(env, "showstats", "--plot", str(png), "--by-rm")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "plot written" in plotted.stderr
    bad = run(env, "showstats", "--history", "year", ok=False)
    assert bad.exit_code == 2 and "year" in bad.output


def test_diagnose_nodes_with_heartbeats(ops):  # noqa: F811
    env, insert, settings, now = ops
    registry = NodeRegistry.from_settings(settings)
    try:
        registry.register("rmA", "node1", {"procs": 4}, {}, "configured", now.timestamp())
    finally:
        registry.client.close()
    insert(rm="rmA", user="ann", state=JobState.ACTIVE, tasks=2, procs=2, walltime=600,
           start_time=now, nodes_allocated={"node1": 2})
    rows = {r["node"]: r for r in json.loads(run(env, "diagnose", "-n", "--json").stdout)}
    assert set(rows) == {"node1", "node2", "node3", "node4"}
    assert rows["node1"]["problems"] == [] and rows["node1"]["dedicated"] == {"procs": 2}
    assert [p["kind"] for p in rows["node2"]["problems"]] == ["heartbeat"]
    one = json.loads(run(env, "diagnose", "-n", "node3", "--json").stdout)
    assert [r["node"] for r in one] == ["node3"]
    assert "node diagnostics" in run(env, "diagnose", "-n").stdout


def test_diagnose_reservations_and_fairshare(ops):  # noqa: F811
    env, _, settings, now = ops
    env = offline(env)
    with session_factory(get_engine(settings.database_url))() as s:
        for name, start, end in (("maint", -60, 60), ("late", 30, 90)):
            s.add(Reservation(name=name, rm="rmA", kind=ReservationKind.ADMIN,
                              acl={"users": ["ann"]}, nodes=["node1"],
                              resources={"procs_by_node": {"node1": 3}},
                              start_time=now + timedelta(minutes=start),
                              end_time=now + timedelta(minutes=end)))
        s.commit()
    rows = {r["name"]: r for r in json.loads(run(env, "diagnose", "-r", "--json").stdout)}
    assert {p["kind"] for p in rows["late"]["problems"]} == {"overlap", "overcommit"}
    one = json.loads(run(env, "diagnose", "-r", "maint", "--json").stdout)
    assert [r["name"] for r in one] == ["maint"] and one[0]["token_state"] is None
    scoped = json.loads(run(env, "diagnose", "-r", "--rm", "rmB", "--json").stdout)
    assert scoped == []
    assert "reservation diagnostics" in run(env, "diagnose", "-r").stdout
    fs = json.loads(run(env, "diagnose", "-f", "--json").stdout)
    assert [r["rm"] for r in fs] == ["rmA", "rmB"]
    assert all({"policy", "interval_s", "depth", "decay", "rows"} <= set(r) for r in fs)
    assert "FSPOLICY" in run(env, "diagnose", "-f").stdout
    both = run(env, "diagnose", "-n", "-f", ok=False)
    assert both.exit_code == 1 and "exactly one of" in both.stderr
    extra = run(env, "diagnose", "-f", "x", ok=False)
    assert "takes no argument" in extra.stderr
