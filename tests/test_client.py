"""The Python API with the RMs' gatekeepers only: validation, records, events, waiting,
cancel rules."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone

import pytest

import grid_tasks
from grid_tasks import db
from grid_tasks.celery_app import SCHEDULER_QUEUE, gatekeeper_queue
from grid_tasks.client import Grid, JobStatus
from grid_tasks.embedded.stack import prepare_database
from grid_tasks.errors import NotFoundError
from grid_tasks.events import append_output
from grid_tasks.gram.errors import JobFinishedError, JobRefusedError, WaitTimeoutError
from grid_tasks.gram.records import Outbox, finish, transition
from grid_tasks.rsl import RSLError
from grid_tasks.states import JobState, MauiJobState
from grid_tasks.topology import load_topology


@pytest.fixture
def grid(settings, celery_app_factory, in_process_worker):
    """A client and the two RMs' gatekeepers (an in-process worker on gram.rmA/gram.rmB),
    which record what the client asks, and the scheduler queue (where a client that
    knows only a job's id asks for it): no node daemon."""
    prepare_database(settings, load_topology(settings.topology_file))
    in_process_worker(celery_app_factory(), queues=[gatekeeper_queue("rmA"),
                                                    gatekeeper_queue("rmB"), SCHEDULER_QUEUE])
    with Grid(settings) as g:
        yield g
    db.dispose_engines(settings.database_url)


def test_package_exports_the_narrow_api():
    assert grid_tasks.Grid is Grid and grid_tasks.JobStatus is JobStatus
    assert set(grid_tasks.__all__) == {"Grid", "GridTasksError", "JobHandle", "JobStatus"}
    with pytest.raises(AttributeError):
        grid_tasks.nothing_here  # noqa: B018


def test_submit_stores_a_pending_job_with_history_and_contact(grid):
    job = grid.submit("&(executable=/bin/echo)(arguments=a b)(count=2)(maxWallTime=5)",
                      rm="rmB", user="alice", idempotency_key="k1")
    status = job.status()
    assert status.state is JobState.PENDING and status.maui_state is MauiJobState.IDLE
    assert status.user == "alice" and status.contact == f"gram://rmB/jobs/{job.id}"
    assert grid.job(job.contact).id == job.id == grid.job(str(job.id)).id
    assert [h.to_state for h in job.history()] == [JobState.PENDING]
    assert grid.submit("&(executable=/bin/true)", rm="rmB", idempotency_key="k1").id == job.id
    with db.session_scope(grid.sessions) as s:
        row = db.repository.get_job(s, job.id)
        assert row.walltime == 300 and row.tasks == 2 and row.request["arguments"] == ["a", "b"]
    data = status.to_dict()
    assert data["state"] == "PENDING" and isinstance(data["submit_time"], str)


def test_bad_requests_are_refused_before_anything_is_stored(grid):
    with pytest.raises(RSLError):
        grid.submit("&(executable=/bin/true", rm="rmA")
    with pytest.raises(JobRefusedError, match="coalloc"):
        grid.submit("+(&(executable=/bin/true))(&(executable=/bin/true))", rm="rmA")
    with pytest.raises(NotFoundError, match="rmA, rmB"):
        grid.submit("&(executable=/bin/true)")  # two RMs: must choose
    with pytest.raises(JobRefusedError, match="minMemory"):
        grid.submit("&(executable=/bin/true)(minMemory=9000)", rm="rmA")
    with pytest.raises(JobRefusedError, match="hostCount 3"):
        grid.submit("&(executable=/bin/true)(hostCount=3)", rm="rmB")
    with pytest.raises(NotFoundError):
        grid.job(1)
    with pytest.raises(NotFoundError, match="rmC.*rmA, rmB"):
        grid.submit("&(executable=/bin/true)", rm="rmC")  # named by the node lookup
    with db.session_scope(grid.sessions) as s:
        assert s.query(db.models.Job).count() == 0


def test_a_repeated_key_returns_the_first_job_even_when_the_retry_would_be_refused(grid):
    first = grid.submit("&(executable=/bin/true)", rm="rmA", idempotency_key="k2")
    again = grid.submit("&(executable=/bin/true)(count=99)", rm="rmA", idempotency_key="k2")
    assert first.id == again.id and first.contact == again.contact
    with pytest.raises(NotFoundError, match="rmC"):  # no such RM: no gatekeeper to ask
        grid.submit("&(executable=/bin/true)", rm="rmC", idempotency_key="k2")
    with pytest.raises(JobRefusedError, match="99 processors"):
        grid.submit("&(executable=/bin/true)(count=99)", rm="rmA", idempotency_key="k3")
    with db.session_scope(grid.sessions) as s:
        assert s.query(db.models.Job).count() == 1


def test_wait_blocks_on_events_and_times_out(grid):
    job = grid.submit("&(executable=/bin/true)", rm="rmA")
    with pytest.raises(WaitTimeoutError) as waited:
        job.wait(timeout=0.3)
    assert waited.value.status.state is JobState.PENDING

    def finish_later():  # what a job manager does: SQL first, then the event
        time.sleep(0.3)
        outbox = Outbox()
        with db.session_scope(grid.sessions) as s:
            row = db.repository.get_job(s, job.id)
            now = datetime.now(timezone.utc)
            transition(s, row, JobState.ACTIVE, "started", now, outbox)
            finish(s, row, JobState.DONE, "exit code 0", now, outbox, exit_code=0,
                   exit_codes={"0": 0})
        outbox.flush(grid.redis)

    threading.Thread(target=finish_later).start()
    t0 = time.monotonic()
    status = job.wait(timeout=10)
    assert status.state is JobState.DONE and status.exit_codes == {"0": 0}
    assert time.monotonic() - t0 < 5
    with db.session_scope(grid.sessions) as s:
        assert db.repository.accounting_records(s, rm="rmA")[0].job_id == job.id


def test_cancel_rules_and_output(grid):
    job = grid.submit("&(executable=/bin/true)", rm="rmA")
    assert grid.cancel(job.id).state is JobState.FAILED
    assert job.status().gram_error == "USER_CANCELLED" and job.status().gram_error_code == 8
    with pytest.raises(JobFinishedError, match="FAILED already"):
        job.cancel()
    with pytest.raises(NotFoundError):
        grid.cancel(12345)
    append_output(grid.redis, job.id, "stdout", "node1", 0, b"hello\n")
    append_output(grid.redis, job.id, "stderr", "node1", 0, b"oops\n")
    assert job.output() == "hello\n" and job.output("stderr") == "oops\n"
    with pytest.raises(grid_tasks.GridTasksError, match="stdout or stderr"):
        job.output("stdlog")


def test_an_application_needs_no_database(grid, settings):
    """Everything an application does goes through the door and Redis: with a database
    URL that leads nowhere it submits, follows, reads the history, waits and cancels."""
    nowhere = settings.replace(database_url="postgresql+psycopg://nobody@127.0.0.1:1/none")
    with Grid(nowhere) as app:
        job = app.submit("&(executable=/bin/true)(count=2)", rm="rmB")
        assert app.job(job.contact).status().state is JobState.PENDING
        assert app.job(str(job.id)).rm == "rmB"  # by id alone: the scheduler answers
        assert [h.to_state for h in job.history()] == [JobState.PENDING]
        with pytest.raises(WaitTimeoutError):
            job.wait(timeout=0.2)
        assert app.cancel(job.contact).state is JobState.FAILED
        with pytest.raises(NotFoundError):
            app.status(98765)
        assert app.services._sessions is None  # never made: no engine, no connection
