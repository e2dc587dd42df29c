"""Round trips of every model on every backend, and the column types' behaviour."""

from __future__ import annotations

from datetime import timedelta, timezone, datetime

import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from grid_tasks.db import (
    AccountingRecord,
    BarrierState,
    CoallocatedJob,
    Job,
    JobStateHistory,
    Node,
    Reservation,
    ReservationKind,
    ResourceManager,
    Subjob,
)
from grid_tasks.states import (
    JobState,
    MauiJobState,
    NodeState,
    SubjobCommsType,
    SubjobStartType,
)

from .conftest import T0


def _fresh(session: Session, obj):
    """Commit, forget everything, and load ``obj`` again from the database."""
    session.commit()
    key = type(obj), session.identity_key(instance=obj)[1]
    session.expunge_all()
    return session.get(*key)


def _job(**overrides) -> Job:
    fields = dict(
        contact="gram://rmA/1", rm="rmA", owner="/O=Grid/CN=Ada", user="ada", group="staff",
        account="physics", job_class="batch", qos="high", rsl="&(executable=/bin/true)",
        request={"count": 4, "executable": "/bin/true"}, state=JobState.PENDING,
        maui_state=MauiJobState.IDLE, submit_time=T0, walltime=600, procs=4, tasks=4,
        priority=10, holds=["user"], dependencies=[7], early_start=False,
        idempotency_key="submit-1", launch_token="tok-1",
    )
    fields.update(overrides)
    return Job(**fields)


def test_resource_manager_and_nodes_round_trip(grid: Session, topology) -> None:
    rm = _fresh(grid, grid.get(ResourceManager, "rmA"))
    assert rm.policy_file.endswith("maui.cfg")
    assert rm.attributes == {"site": "north"}
    assert [n.name for n in rm.nodes] == ["a1", "a2"]
    a1 = rm.nodes[0]
    assert (a1.procs, a1.memory_mb, a1.disk_mb, a1.swap_mb) == (4, 4096, 20000, 1024)
    assert a1.features == ["fast", "ib"]
    assert a1.attributes == dict(topology.node("rmA", "a1").attributes)
    assert a1.attributes["arch"] == "x86_64"
    assert a1.state is NodeState.UNKNOWN


def test_job_round_trip_keeps_every_field(grid: Session) -> None:
    job = _job(exit_code=3, failure_reason="boom", gram_error_code=7, gram_error="BAD_RSL",
               start_time=T0 + timedelta(seconds=5), end_time=T0 + timedelta(seconds=65),
               nodes_allocated={"a1": 2, "a2": 2}, coallocation_label="left")
    grid.add(job)
    got = _fresh(grid, job)
    assert isinstance(got.id, int) and got.version == 1
    for name in ("contact", "rm", "owner", "user", "group", "account", "job_class", "qos",
                 "rsl", "request", "walltime", "procs", "tasks", "priority", "holds",
                 "dependencies", "early_start", "idempotency_key", "launch_token",
                 "exit_code", "failure_reason", "gram_error_code", "gram_error",
                 "nodes_allocated", "coallocation_label"):
        assert getattr(got, name) == getattr(job, name), name
    assert got.state is JobState.PENDING and got.maui_state is MauiJobState.IDLE
    assert got.submit_time == T0 and got.submit_time.tzinfo is not None
    assert got.end_time - got.start_time == timedelta(seconds=60)


def test_job_ids_autoincrement_and_defaults(grid: Session) -> None:
    first, second = Job(rm="rmA"), Job(rm="rmB")
    grid.add_all([first, second])
    grid.commit()
    assert second.id > first.id
    fresh = _fresh(grid, first)
    assert fresh.state is JobState.UNSUBMITTED and fresh.maui_state is MauiJobState.IDLE
    assert fresh.holds == [] and fresh.request == {} and fresh.early_start is True


def test_enums_are_stored_as_readable_strings(grid: Session) -> None:
    grid.add(_job(state=JobState.ACTIVE, maui_state=MauiJobState.RUNNING))
    grid.commit()
    row = grid.execute(text("SELECT state, maui_state FROM jobs")).one()
    assert tuple(row) == ("ACTIVE", "Running")


def test_timestamps_come_back_in_utc_whatever_zone_went_in(grid: Session) -> None:
    plus_two = timezone(timedelta(hours=2))
    job = _job(submit_time=datetime(2026, 1, 2, 5, 4, 5, tzinfo=plus_two))
    grid.add(job)
    got = _fresh(grid, job)
    assert got.submit_time == T0
    assert got.submit_time.utcoffset() == timedelta(0)


def test_json_columns_track_in_place_changes(grid: Session) -> None:
    job = _job()
    grid.add(job)
    grid.commit()
    job.holds.append("system")
    job.request["count"] = 8
    got = _fresh(grid, job)
    assert got.holds == ["user", "system"]
    assert got.request["count"] == 8


def test_history_round_trip_and_cascade_delete(grid: Session) -> None:
    job = _job()
    grid.add(job)
    grid.flush()
    grid.add(JobStateHistory(job_id=job.id, from_state=None, to_state=JobState.PENDING,
                             reason="submitted", at=T0))
    grid.commit()
    grid.expunge_all()
    entry = grid.scalars(select(JobStateHistory)).one()
    assert (entry.from_state, entry.to_state, entry.reason, entry.at) == (
        None, JobState.PENDING, "submitted", T0)
    grid.delete(grid.get(Job, job.id))
    grid.commit()
    assert grid.scalars(select(JobStateHistory)).all() == []


def test_coallocated_job_with_subjobs_round_trip(grid: Session) -> None:
    gram = _job(coallocation_label="left")
    co = CoallocatedJob(contact="duroc://1", owner="ada", rsl="+(&(count=1))(&(count=2))",
                        state=JobState.PENDING, barrier_timeout=30.0,
                        barrier_deadline=T0 + timedelta(seconds=30))
    co.subjobs = [
        Subjob(position=1, label="right", rm="rmB", start_type=SubjobStartType.LOOSE_BARRIER,
               comms_type=SubjobCommsType.INDEPENDENT),
        Subjob(position=0, label="left", rm="rmA", gram_job=gram, checked_in=2),
    ]
    co.jobs = [gram]
    grid.add(co)
    got = _fresh(grid, co)
    assert got.barrier_state is BarrierState.WAITING
    assert got.barrier_deadline == T0 + timedelta(seconds=30)
    assert [s.label for s in got.subjobs] == ["left", "right"]  # ordered by position
    left, right = got.subjobs
    assert left.start_type is SubjobStartType.STRICT_BARRIER
    assert left.comms_type is SubjobCommsType.BLOCKING_JOIN
    assert right.start_type is SubjobStartType.LOOSE_BARRIER
    assert left.gram_job.contact == "gram://rmA/1" and left.checked_in == 2
    assert got.jobs[0].coallocation_label == "left"


def test_subjob_labels_are_unique_within_a_coallocation(grid: Session) -> None:
    co = CoallocatedJob()
    co.subjobs = [Subjob(label="x", rm="rmA"), Subjob(label="x", rm="rmB", position=1)]
    grid.add(co)
    with pytest.raises(IntegrityError):
        grid.commit()


def test_deleting_a_coallocation_deletes_its_subjobs_in_sql(grid: Session) -> None:
    co = CoallocatedJob(subjobs=[Subjob(label="a", rm="rmA")])
    grid.add(co)
    grid.commit()
    # A bulk DELETE bypasses the ORM: the database's own ON DELETE CASCADE must act
    # (on SQLite only when the foreign_keys pragma is on).
    grid.execute(text("DELETE FROM coallocated_jobs"))
    grid.commit()
    assert grid.execute(text("SELECT count(*) FROM subjobs")).scalar() == 0


def test_reservation_round_trip_and_acl(grid: Session) -> None:
    job = _job()
    grid.add(job)
    grid.flush()
    res = Reservation(name="grid.1", rm="rmA", kind=ReservationKind.GRID,
                      acl={"users": ["ada"], "jobs": [job.id]}, nodes=["a1", "a2"],
                      resources={"procs": 2}, start_time=T0, end_time=T0 + timedelta(hours=1),
                      owner_job_id=job.id, token="tok-1")
    grid.add(res)
    got = _fresh(grid, res)
    assert got.kind is ReservationKind.GRID and got.confirmed is False
    assert got.admits("users", "ada") and not got.admits("users", "bob")
    assert got.admits("jobs", job.id) and not got.admits("groups", "staff")
    assert (got.nodes, got.resources, got.token) == (["a1", "a2"], {"procs": 2}, "tok-1")
    assert got.end_time - got.start_time == timedelta(hours=1)


def test_reservation_names_are_unique_per_rm(grid: Session) -> None:
    grid.add(Reservation(name="r", rm="rmA", start_time=T0, end_time=T0))
    grid.add(Reservation(name="r", rm="rmB", start_time=T0, end_time=T0))
    grid.commit()
    grid.add(Reservation(name="r", rm="rmA", start_time=T0, end_time=T0))
    with pytest.raises(IntegrityError):
        grid.commit()


def test_accounting_round_trip(grid: Session) -> None:
    rec = AccountingRecord(job_id=41, rm="rmA", owner="o", user="ada", group="staff",
                           account="physics", job_class="batch", qos="high",
                           nodes={"a1": 4}, procs=4, submit_time=T0,
                           start_time=T0 + timedelta(seconds=10),
                           end_time=T0 + timedelta(seconds=70), wall_seconds=60.0,
                           proc_seconds=240.0, exit_status=0, final_state=JobState.DONE)
    grid.add(rec)
    got = _fresh(grid, rec)
    assert (got.user, got.group, got.account, got.job_class, got.qos) == (
        "ada", "staff", "physics", "batch", "high")
    assert got.nodes == {"a1": 4} and got.proc_seconds == 240.0
    assert got.wait_seconds == 10.0 and got.final_state is JobState.DONE


def test_node_names_are_unique_per_rm(grid: Session) -> None:
    grid.add(Node(rm="rmA", name="a1", procs=1))
    with pytest.raises(IntegrityError):
        grid.commit()


def test_over_long_strings_are_refused_alike_on_every_backend(grid: Session) -> None:
    from grid_tasks.db import RecordError

    grid.add(_job(user="u" * 129))
    with pytest.raises(RecordError, match=r"jobs\.user_name: at most 128 characters, got 129"):
        grid.flush()
    grid.rollback()
    job = _job()
    grid.add(job)
    grid.commit()
    job.qos = "q" * 200
    with pytest.raises(RecordError, match=r"jobs\.qos: at most 128"):
        grid.commit()
