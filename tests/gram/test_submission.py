"""Storing a submission (plain INSERTs, not an ORM flush): row, contact, history, event."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from grid_tasks import db
from grid_tasks.embedded.stack import prepare_database
from grid_tasks.gram.records import Outbox
from grid_tasks.gram.errors import JobRefusedError
from grid_tasks.gram.submission import check_fits, insert_job
from grid_tasks.rsl import lower
from grid_tasks.states import JobState, MauiJobState
from grid_tasks.topology import load_topology

RSL = "&(executable=/bin/true)(count=2)(maxWallTime=5)(project=p1)"


@pytest.fixture
def sessions(settings):
    prepare_database(settings, load_topology(settings.topology_file))
    yield db.session_factory(db.get_engine(settings.database_url))
    db.dispose_engines(settings.database_url)


def test_insert_job_stores_a_pending_job_with_contact_history_and_event(sessions):
    now, outbox = datetime.now(timezone.utc), Outbox()
    with db.session_scope(sessions) as s:
        job_id, contact = insert_job(s, "rmA", RSL, lower(RSL)[0], {"user": "ann"}, now,
                                     outbox, idempotency_key="k1")
    assert contact == f"gram://rmA/jobs/{job_id}"
    with db.session_scope(sessions) as s:
        row = db.repository.get_job_by_contact(s, contact)
        assert (row.id, row.state, row.maui_state) == (job_id, JobState.PENDING,
                                                      MauiJobState.IDLE)
        assert (row.user, row.owner, row.account, row.procs, row.walltime) == (
            "ann", "ann", "p1", 2, 300)
        assert row.version == 1 and row.created_at is not None
        assert [(h.from_state, h.to_state, h.reason) for h in row.history] == [
            (JobState.UNSUBMITTED, JobState.PENDING, "submitted")]
        row.priority = 3  # the optimistic lock works on a row inserted without the ORM
    with db.session_scope(sessions) as s:
        assert db.repository.get_job(s, job_id).version == 2
    assert [(e.job, e.state) for e in outbox.events] == [(job_id, "PENDING")]
    assert outbox.rms == {"rmA"}


def test_insert_job_refuses_an_over_long_credential_naming_the_column(sessions):
    with db.session_scope(sessions) as s, pytest.raises(
            db.RecordError, match=r"jobs\.user_name: at most 128 characters, got 129"):
        insert_job(s, "rmA", RSL, lower(RSL)[0], {"user": "u" * 129},
                   datetime.now(timezone.utc), Outbox())
    with db.session_scope(sessions) as s:
        assert s.query(db.models.Job).count() == 0


def test_check_fits_refuses_a_conflicting_contact_and_memory_no_node_has(sessions):
    """The gatekeeper's own check (a client that skipped Grid.submit's meets it too)."""
    with db.session_scope(sessions) as s:
        check_fits(s, "rmA", lower("&(executable=/bin/true)(maxMemory=4096)")[0])  # fits
        elsewhere = lower("&(executable=/bin/true)(resourceManagerContact=rmB)")[0]
        with pytest.raises(JobRefusedError, match="names resourceManagerContact=rmB but was "
                                                  "sent to rmA") as conflict:
            check_fits(s, "rmA", elsewhere)
        assert conflict.value.code == "INVALID_REQUEST"
        greedy = lower("&(executable=/bin/true)(maxMemory=4097)")[0]
        with pytest.raises(JobRefusedError, match="4097 MB .maxMemory. and its largest "
                                                  "node has 4096 MB") as memory:
            check_fits(s, "rmA", greedy)
        assert memory.value.code == "NO_RESOURCES"
