"""diagnose -n (nodes), -r (reservations) and -f (fairshare) on the ops test grid, with a
real heartbeat registry and token store on the private Redis where they matter."""

from __future__ import annotations

from datetime import timedelta

import pytest

from grid_tasks.db import Reservation, ReservationKind, repository
from grid_tasks.errors import NotFoundError
from grid_tasks.legion.tokens import Claim, TokenStore
from grid_tasks.node.registry import NodeRegistry
from grid_tasks.ops import diagnose_priority
from grid_tasks.ops.common import epoch
from grid_tasks.ops.diag_fs import diagnose_fairshare
from grid_tasks.ops.diag_nodes import diagnose_nodes
from grid_tasks.ops.diag_res import diagnose_reservations
from grid_tasks.states import JobState

from .conftest import NOW
from .test_stats_history import FS_CFG, _record

HOUR = timedelta(hours=1)


def _kinds(diag) -> set[str]:
    return {p.kind for p in diag.problems}


@pytest.fixture
def registry(settings):
    reg = NodeRegistry.from_settings(settings.replace(heartbeat_ttl=60.0))
    yield reg
    reg.client.close()


def test_nodes_heartbeats_and_allocation(session, add_job, registry):
    t = epoch(NOW)
    registry.register("rmA", "a1", {"procs": 4}, {}, "configured", t - 1)
    registry.register("rmA", "a2", {"procs": 6}, {}, "detected", t - 300)  # stale, 6 procs
    add_job("rmA", user="alice", state=JobState.ACTIVE, tasks=3, nodes={"a1": 3}, started=-60)
    add_job("rmA", user="bob", state=JobState.ACTIVE, tasks=6, nodes={"a2": 6}, started=-60)
    found = {d.report.name: d for d in diagnose_nodes(session, NOW, registry=registry)}
    assert list(found) == ["a1", "a2", "b1"]
    a1, a2, b1 = found["a1"], found["a2"], found["b1"]
    assert a1.problems == [] and a1.report.dedicated_procs == 3
    assert a1.heartbeat_age == pytest.approx(1.0) and a1.heartbeat_ttl == 60.0
    assert _kinds(a2) == {"heartbeat", "overallocated", "resources"}
    assert "stale heartbeat" in a2.problems[0].message
    assert _kinds(b1) == {"heartbeat"} and "never registered" in b1.problems[0].message
    data = a2.to_dict()
    assert data["dedicated"] == {"procs": 6} and len(data["problems"]) == 3
    # without the registry (Redis unreachable) heartbeats are not judged
    one = diagnose_nodes(session, NOW, node="b1")
    assert len(one) == 1 and one[0].problems == [] and one[0].heartbeat_ttl is None
    with pytest.raises(NotFoundError, match="unknown node 'zz'"):
        diagnose_nodes(session, NOW, node="zz")


def _res(session, name, kind=ReservationKind.ADMIN, procs=None, start=-1, end=1, **extra):
    res = Reservation(name=name, rm="rmA", kind=kind, acl={"users": ["alice"]},
                      nodes=sorted(procs or {}), resources={"procs_by_node": procs or {}},
                      start_time=NOW + start * HOUR, end_time=NOW + end * HOUR, **extra)
    session.add(res)
    session.commit()
    return res


def test_reservation_problems(session, add_job, settings):
    store = TokenStore.from_url(settings.redis_url, settings=settings, prefix="diagtest")
    store.set_capacities({"rmA": 8})
    [held] = store.take([Claim("rmA", epoch(NOW), epoch(NOW) + 3600, 2)], "broker", ttl=600)
    done = add_job("rmA", user="alice", state=JobState.DONE, started=-900, ended=-300)
    _res(session, "R1", procs={"a1": 3})
    _res(session, "R2", procs={"a1": 2}, start=0, end=2)
    _res(session, "old", procs={"a2": 1}, start=-3, end=-1)
    _res(session, "G1", ReservationKind.GRID, {"a2": 2}, token="gone-token")
    _res(session, "G2", ReservationKind.GRID, {"a2": 2}, start=2, end=3, token=held.id)
    _res(session, "J1", ReservationKind.JOB, {"a2": 1}, start=4, end=5, owner_job_id=done.id)
    found = {d.row.name: d for d in
             diagnose_reservations(session, NOW, rm="rmA", tokens=store.get)}
    assert _kinds(found["R1"]) == {"overlap"}
    assert _kinds(found["R2"]) == {"overlap", "overcommit"}
    assert "5 processors reserved" in next(p.message for p in found["R2"].problems
                                           if p.kind == "overcommit")
    assert _kinds(found["old"]) == {"expired"}
    assert found["G1"].token_state == "missing" and "token" in _kinds(found["G1"])
    assert found["G2"].token_state == "held" and found["G2"].problems == []
    assert found["J1"].job_state == "DONE" and _kinds(found["J1"]) == {"job"}
    data = found["G2"].to_dict(NOW)
    assert data["token"] == held.id and data["acl"] == {"users": ["alice"]}
    # no token store (Redis down): unknown, not a problem
    g1 = diagnose_reservations(session, NOW, name="G1")
    assert g1[0].token_state == "unknown" and "token" not in _kinds(g1[0])
    with pytest.raises(NotFoundError, match="unknown reservation 'nope'"):
        diagnose_reservations(session, NOW, name="nope")


def test_fairshare_windows_and_priority_component(session, add_job, tmp_path):
    cfg = tmp_path / "maui.cfg"
    cfg.write_text(FS_CFG)
    repository.get_rm(session, "rmA").policy_file = str(cfg)
    session.commit()
    day = 86400
    start_of_day = -12 * 3600  # NOW is 12:00 UTC
    _record(session, add_job, "rmA", "alice", 4, start_of_day - day + 3600,
            start_of_day - day + 7200)  # 4 proc-hours yesterday
    _record(session, add_job, "rmA", "carol", 2, -3 * 3600, -3600)  # 4 proc-hours today
    idle = add_job("rmA", user="alice", submitted=-60)
    reports = {r.rm: r for r in diagnose_fairshare(session, NOW)}
    assert not reports["rmB"].enabled and reports["rmB"].rows == []
    fs = reports["rmA"]
    assert (fs.policy, fs.interval, fs.depth, fs.decay) == ("DEDICATEDPS", 86400.0, 4, 0.5)
    assert fs.totals == pytest.approx([4.0, 4.0, 0.0, 0.0])
    alice = fs.row("USER", "alice")
    assert alice.windows == pytest.approx([0.0, 4.0, 0.0, 0.0])
    # decayed: alice 0.5 x 4 of (4 + 0.5 x 4) = 33.3 %, target 25 -> delta -8.3
    assert alice.usage_percent == pytest.approx(100 / 3)
    assert alice.target == "25" and alice.delta == pytest.approx(25 - 100 / 3)
    assert alice.weight == 10 and alice.component == pytest.approx(10 * (25 - 100 / 3))
    bob = fs.row("USER", "bob")
    assert bob.windows == [0.0] * 4 and bob.delta == pytest.approx(50.0)  # floor target
    assert fs.row("GROUP", "g-carol").usage_percent == pytest.approx(200 / 3)
    # the same component the priority of alice's idle job carries
    [prio] = [p for p in diagnose_priority(session, "rmA", NOW) if p.job_id == idle.id]
    assert prio.components["FS"] == pytest.approx(alice.component)
    assert fs.to_dict()["rows"][0]["windows"]
