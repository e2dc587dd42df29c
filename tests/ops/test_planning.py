"""setres/showres/releaseres, showstart, showbf and diagnose on the RM's Maui core
loaded from SQL (grid_tasks.scheduling.state.load_scheduler)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from grid_tasks.db import Reservation, ReservationKind
from grid_tasks.errors import NotFoundError
from grid_tasks.maui import ReservationRefused
from grid_tasks.ops import (
    OpsError, ReservationError, TimeFormatError, check_node, diagnose_jobs, diagnose_priority,
    parse_resources, release_reservations, set_reservation, show_backfill,
    show_reservations, show_start,
)
from grid_tasks.states import JobState, MauiJobState

from .conftest import NOW

INF = float("inf")
NODES = ("a1", "a2")


@pytest.fixture
def busy(add_job):
    """6 of rmA's 8 processors run until NOW + 3000 s (a1 full, 2 on a2)."""
    return add_job("rmA", user="ann", state=JobState.ACTIVE, tasks=6, nodes={"a1": 4, "a2": 2},
                   walltime=3600, started=-600)


def test_showstart_requests_wait_for_the_running_job(session, busy):
    end = NOW + timedelta(seconds=3000)
    big = show_start(session, "4@1:00:00", NOW, rm="rmA")
    assert big.estimates[0].start == end and big.procs == 4
    small = show_start(session, "2@30m", NOW, rm="rmA")
    assert small.estimates[0].start == NOW and small.estimates[0].allocation == {"a2": 2}
    rsl = show_start(session, "&(executable=/bin/true)(count=3)(maxWallTime=10)", NOW, rm="rmA")
    assert rsl.walltime == 600 and rsl.estimates[0].start == end
    with pytest.raises(OpsError, match="'9@1:00:00' can never run on rmA: it asks for 9 "
                                       "processors and rmA has 8 processors on 2 nodes"):
        show_start(session, "9@1:00:00", NOW, rm="rmA")


def test_showstart_of_an_idle_job_sees_higher_priority_work(session, busy, add_job):
    first = add_job("rmA", user="alice", tasks=8, submitted=-60)  # PRIORITY=500: first
    second = add_job("rmA", user="bob", tasks=2, walltime=600, submitted=-120)
    report = show_start(session, str(first.id), NOW)
    assert report.job_id == first.id and report.estimates[0].start == NOW + timedelta(seconds=3000)
    # bob's 2 x 600 s fit before alice's reservation: backfilled at once
    assert show_start(session, str(second.id), NOW).estimates[0].start == NOW
    with pytest.raises(OpsError, match="not waiting"):
        show_start(session, str(busy.id), NOW)
    with pytest.raises(OpsError, match="give -r RM"):
        show_start(session, "2@1:00", NOW)
    with pytest.raises(TimeFormatError, match="request: cannot read duration 'soon'"):
        show_start(session, "2@soon", NOW, rm="rmA")


def test_showbf_windows_shrink_before_a_reservation(session, busy, add_job):
    assert show_backfill(session, "rmA", NOW) == [
        type(show_backfill(session, "rmA", NOW)[0])(2, 1, INF)]
    add_job("rmA", user="alice", tasks=8, submitted=-60)
    windows = show_backfill(session, "rmA", NOW)
    assert [(w.procs, w.nodes, w.duration) for w in windows] == [(2, 1, 3000)]
    assert show_backfill(session, "rmA", NOW, min_duration=3600) == []
    assert show_backfill(session, "rmA", NOW, min_nodes=2) == []


def test_setres_is_validated_by_the_core_and_stored(session, busy):
    whole = parse_resources("a1", None, NODES)
    with pytest.raises(ReservationRefused, match=r"a1 has only 0 of 4 processors free over "
                       r"\[2026-03-04T12:00:00\+00:00, 2026-03-04T13:00:00\+00:00\)"):
        set_reservation(session, "rmA", whole, start=NOW, end=NOW + timedelta(hours=1),
                        acl={}, now=NOW)
    row = set_reservation(session, "rmA", parse_resources("TASKS==2", None, NODES),
                          start=NOW, end=NOW + timedelta(hours=1), acl={"users": ["alice"]},
                          now=NOW)
    session.commit()
    assert row.name == "alice.0" and row.kind is ReservationKind.ADMIN
    assert row.resources["procs_by_node"] == {"a2": 2} and row.acl == {"users": ["alice"]}
    with pytest.raises(ReservationRefused):  # nothing left: no overcommit
        set_reservation(session, "rmA", parse_resources("TASKS==1", None, NODES),
                        start=NOW, end=NOW + timedelta(hours=1), acl={}, now=NOW)
    later = set_reservation(session, "rmA", whole, start=NOW + timedelta(seconds=3000),
                            end=None, acl={"groups": ["ops"]}, now=NOW, name="maint")
    session.commit()
    assert later.nodes == ["a1"]
    node = check_node(session, "a2", NOW).to_dict()
    assert node["reserved"]["procs"] == 2 and node["available"]["procs"] == 0
    listed = {r.name: r.to_dict(NOW) for r in show_reservations(session, NOW, "rmA")}
    assert set(listed) == {"alice.0", "maint", f"job.{busy.id}"}
    assert listed["maint"]["end"] is None and listed["maint"]["duration"] == "INFINITY"
    assert listed["maint"]["state"] == "Idle" and listed["alice.0"]["state"] == "Active"
    assert listed[f"job.{busy.id}"]["procs"] == 6
    # a reserved job start: showstart for 4 procs now waits for both the job and alice.0
    assert show_start(session, "4@10:00", NOW, rm="rmA").estimates[0].start > NOW


def test_setres_errors(session):
    with pytest.raises(ReservationError, match="hostlist 'z.*' matches no node"):
        parse_resources("z.*", None, NODES)
    with pytest.raises(ReservationError, match="-r: cannot read 'CPU=2'"):
        parse_resources("TASKS==1", "CPU=2", NODES)
    assert parse_resources("2@a[12]", "PROCS=2,MEM=100", NODES).nodes == ("a1", "a2")
    set_reservation(session, "rmB", parse_resources("ALL", None, ("b1",)), start=NOW,
                    end=NOW + timedelta(minutes=5), acl={}, now=NOW, name="x")
    with pytest.raises(ReservationError, match="'x' already exists on rmB"):
        set_reservation(session, "rmB", parse_resources("ALL", None, ("b1",)), start=NOW,
                        end=NOW + timedelta(minutes=5), acl={}, now=NOW, name="x")
    with pytest.raises(ReservationError, match="not after its start"):
        set_reservation(session, "rmB", parse_resources("ALL", None, ("b1",)), start=NOW,
                        end=NOW, acl={}, now=NOW, name="y")
    with pytest.raises(NotFoundError, match="unknown resource manager 'rmQ'"):
        set_reservation(session, "rmQ", parse_resources("ALL", None, ("b1",)), start=NOW,
                        end=None, acl={}, now=NOW)


def test_releaseres(session):
    set_reservation(session, "rmB", parse_resources("b1", None, ("b1",)), start=NOW, end=None,
                    acl={}, now=NOW, name="m")
    session.add(Reservation(name="g", rm="rmB", kind=ReservationKind.GRID, nodes=["b1"],
                            start_time=NOW + timedelta(days=1), end_time=NOW + timedelta(days=2)))
    session.commit()
    with pytest.raises(NotFoundError, match="unknown reservation 'nope'"):
        release_reservations(session, ["m", "nope"])
    with pytest.raises(ReservationError, match="grid reservation"):
        release_reservations(session, ["g"])
    assert [r.name for r in release_reservations(session, ["m"], "rmB")] == ["m"]
    session.commit()
    assert [r.name for r in show_reservations(session, NOW, "rmB")] == ["g"]


def test_diagnose_priority_orders_by_credential_priority(session, add_job):
    bob = add_job("rmA", user="bob", submitted=-3600)
    alice = add_job("rmA", user="alice", submitted=-60)
    rows = diagnose_priority(session, "rmA", NOW)
    assert [r.job_id for r in rows] == [alice.id, bob.id]
    assert rows[0].total > rows[1].total and rows[0].user == "alice"
    assert rows[0].components and rows[0].total == pytest.approx(
        sum(rows[0].components.values()), rel=1e-6)


def test_diagnose_jobs_explains_throttle_reservation_and_size(session, busy, add_job):
    add_job("rmA", user="carol", state=JobState.ACTIVE, tasks=1, nodes={"a2": 1},
            started=-10)
    throttled = add_job("rmA", user="carol", tasks=1, walltime=60)
    big = add_job("rmA", user="alice", tasks=8)
    huge = add_job("rmA", user="dan", tasks=16)
    found = {d.job_id: d for d in diagnose_jobs(session, NOW, rm="rmA")}
    assert set(found) == {throttled.id, big.id, huge.id}
    assert [r.kind for r in found[throttled.id].reasons] == ["throttle"]
    assert "USER carol: MAXJOB 1 reached" in found[throttled.id].reasons[0].message
    res = found[big.id].reasons
    # all 8 processors are free once carol's job (started 10 s ago, 3600 s) is over
    assert [r.kind for r in res] == ["reservation"] and res[0].at == NOW + timedelta(seconds=3590)
    assert found[huge.id].reasons[0].kind == "never"
    single = diagnose_jobs(session, NOW, job=str(busy.id))
    assert single[0].reasons[0].message == "not waiting: the job is ACTIVE"


def test_setres_never_overlaps_another_reservation(session):
    hour = timedelta(hours=1)
    b1 = parse_resources("b1", None, ("b1",))
    set_reservation(session, "rmB", b1, start=NOW, end=NOW + hour, acl={"users": ["alice"]},
                    now=NOW, name="alice.res")
    session.commit()
    with pytest.raises(ReservationRefused, match="b1 has only 0 of 2 processors"):
        set_reservation(session, "rmB", b1, start=NOW + hour / 2, end=NOW + 2 * hour,
                        acl={"users": ["bob"]}, now=NOW, name="bob.res")
    after = set_reservation(session, "rmB", b1, start=NOW + hour, end=NOW + 2 * hour,
                            acl={"users": ["bob"]}, now=NOW, name="bob.res")
    assert after.start_time == NOW + hour  # back to back is fine: intervals are half-open


def test_reservation_survives_an_admitted_job_running_inside_it(session, add_job):
    b1 = parse_resources("b1", None, ("b1",))
    set_reservation(session, "rmB", b1, start=NOW, end=NOW + timedelta(hours=1),
                    acl={"users": ["vip"]}, now=NOW, name="vipres")
    add_job("rmB", user="vip", state=JobState.ACTIVE, tasks=1, nodes={"b1": 1}, started=0)
    plain = add_job("rmB", user="plain", tasks=1)
    report = show_start(session, str(plain.id), NOW)
    assert report.estimates[0].start >= NOW + timedelta(hours=1)


def test_setres_takes_in_the_admitted_running_jobs(session, busy):
    a1 = parse_resources("a1", None, NODES)  # ann's job fills a1
    with pytest.raises(ReservationRefused):
        set_reservation(session, "rmA", a1, start=NOW, end=NOW + timedelta(hours=1),
                        acl={"users": ["bob"]}, now=NOW)
    row = set_reservation(session, "rmA", a1, start=NOW, end=NOW + timedelta(hours=1),
                          acl={"users": ["ann"]}, now=NOW)
    assert row.nodes == ["a1"] and row.resources["procs_by_node"] == {"a1": 4}


def test_showstart_of_a_held_job_and_of_a_multirequest(session, busy, add_job):
    held = add_job("rmA", user="bob", tasks=2, walltime=600, holds=["user"],
                   maui=MauiJobState.HOLD)
    report = show_start(session, str(held.id), NOW)
    assert "not in the idle queue" in report.note
    assert report.estimates[0].start == NOW and sum(report.estimates[0].allocation.values()) == 2
    with pytest.raises(OpsError, match="single-job RSL, got a multi-request of 2 subjobs"):
        show_start(session, "+(&(executable=/bin/true))(&(executable=/bin/true))", NOW,
                   rm="rmA")
