"""The coallocated job's SQL rows written with plain statements (job_request, the header's
link) hold what the ORM would have written, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from grid_tasks import db
from grid_tasks.db.models import CoallocatedJob, Job, Subjob
from grid_tasks.db.models.jobs import BarrierState
from grid_tasks.db.testing import postgres_test_url, temporary_database
from grid_tasks.duroc.control_rows import insert_coallocation, link_subjob
from grid_tasks.duroc.errors import CoallocFinishedError
from grid_tasks.gram.records import Outbox
from grid_tasks.gram.submission import build_job
from grid_tasks.rsl import lower
from grid_tasks.states import JobState, SubjobCommsType, SubjobStartType
from grid_tasks.topology import parse_topology

GRID = """
[rm.rmA.node.a1]
procs = 4
[rm.rmB.node.b1]
procs = 4
"""
T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
RSL = ('+(&(resourceManagerContact=rmA)(label=left)(count=2)(executable=/bin/true))'
       '(&(resourceManagerContact=rmB)(count=1)(subjobStartType=loose-barrier)'
       '(subjobCommsType=independent)(executable=/bin/echo)(arguments=hi))')


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def sessions(request: pytest.FixtureRequest):
    url = None
    if request.param == "postgresql":
        url = postgres_test_url()
        if url is None:
            pytest.skip("GRID_TASKS_TEST_POSTGRES_URL is not set")
    with temporary_database(url) as db_url:
        factory = db.session_factory(db.get_engine(db_url))
        with db.session_scope(factory) as session:
            db.sync_topology(session, parse_topology(GRID))
        yield factory
        db.dispose_engines(db_url)


def test_a_request_is_stored_as_the_orm_would_store_it(sessions) -> None:
    subs = lower(RSL)
    with db.session_scope(sessions) as session:
        job_id = insert_coallocation(session, RSL, "alice", 90, subs, ["left", "subjob1"],
                                     T0 + timedelta(seconds=90))
    with db.session_scope(sessions) as session:
        row = session.get(CoallocatedJob, job_id)
        assert (row.contact, row.owner, row.rsl, row.state) == (
            f"duroc://coalloc/{job_id}", "alice", RSL, JobState.PENDING)
        assert row.barrier_state is BarrierState.WAITING and row.barrier_timeout == 90.0
        assert row.barrier_deadline == T0 + timedelta(seconds=90)  # read by the settle
        assert row.created_at is not None and row.version == 1
        left, right = row.subjobs
        assert (left.position, left.label, left.rm, left.state) == (
            0, "left", "rmA", JobState.UNSUBMITTED)
        assert left.start_type is SubjobStartType.STRICT_BARRIER and left.checked_in == 0
        assert (right.position, right.label, right.rm) == (1, "subjob1", "rmB")
        assert right.start_type is SubjobStartType.LOOSE_BARRIER
        assert right.comms_type is SubjobCommsType.INDEPENDENT
        assert lower(right.rsl)[0].executable == "/bin/echo"  # the GRAM part, DUROC's removed
        assert "subjobStartType" not in right.rsl and left.gram_job_id is None
        row.barrier_state = BarrierState.RELEASED  # the ORM's version guard still works on it
    with db.session_scope(sessions) as session:
        assert session.get(CoallocatedJob, job_id).version == 2


def test_link_records_the_gram_job_and_refuses_a_deleted_subjob(sessions) -> None:
    subs = lower(RSL)
    with db.session_scope(sessions) as session:
        job_id = insert_coallocation(session, RSL, "bob", 60, subs, ["left", "right"], T0)
        gram = build_job(session, "rmA", subs[0].gram_rsl(), subs[0], {"user": "bob"},
                         datetime.now(timezone.utc), Outbox()).id
        link_subjob(session, job_id, 0, gram)
    with db.session_scope(sessions) as session:
        left = session.get(CoallocatedJob, job_id).subjobs[0]
        assert (left.gram_job_id, left.state) == (gram, JobState.PENDING)
        session.delete(left)
    with pytest.raises(CoallocFinishedError, match=f"job {job_id} has no subjob 0 any more"):
        with db.session_scope(sessions) as session:
            link_subjob(session, job_id, 0, gram)
    with db.session_scope(sessions) as session:
        assert [s.position for s in session.get(CoallocatedJob, job_id).subjobs] == [1]
        assert session.query(Subjob).count() == 1


def test_link_is_fenced_by_an_ended_job(sessions) -> None:
    """A subjob's GRAM job stored after its job ended (its coordination state lost while
    the header was on its way) is refused with the link, in the same transaction: rolled
    back, the scheduler never sees it."""
    subs = lower(RSL)
    with db.session_scope(sessions) as session:
        job_id = insert_coallocation(session, RSL, "bob", 60, subs, ["left", "right"], T0)
        session.get(CoallocatedJob, job_id).state = JobState.FAILED
    with pytest.raises(CoallocFinishedError, match="or has ended"):
        with db.session_scope(sessions) as session:
            build_job(session, "rmA", subs[0].gram_rsl(), subs[0], {"user": "bob"},
                      datetime.now(timezone.utc), Outbox())
            link_subjob(session, job_id, 0, 99)
    with db.session_scope(sessions) as session:
        assert session.query(Job).count() == 0  # the GRAM job went with the link
        assert session.get(CoallocatedJob, job_id).subjobs[0].gram_job_id is None
        session.get(CoallocatedJob, job_id).state = JobState.ACTIVE
    with db.session_scope(sessions) as session:  # a live job links as before
        gram = build_job(session, "rmA", subs[0].gram_rsl(), subs[0], {"user": "bob"},
                         datetime.now(timezone.utc), Outbox()).id
        link_subjob(session, job_id, 0, gram)
