"""Batched job reports: one transaction per batch, the same per-job checks as one by one."""

from __future__ import annotations

import threading
from datetime import datetime, timezone

import pytest

from grid_tasks.states import JobState


@pytest.fixture
def db_grid(quiet_settings):
    """A migrated SQLite database with the demo topology, and a job factory."""
    from grid_tasks import db
    from grid_tasks.embedded.stack import prepare_database
    from grid_tasks.gram.launch import requests_for
    from grid_tasks.gram.records import Outbox
    from grid_tasks.gram.submission import build_job
    from grid_tasks.rsl import lower
    from grid_tasks.topology import load_topology

    prepare_database(quiet_settings, load_topology(quiet_settings.topology_file))
    sessions = db.session_factory(db.get_engine(quiet_settings.database_url))

    def job(token: str = "tok", nodes: dict[str, int] | None = None):
        rsl = "&(executable=/bin/true)"
        nodes = nodes or {"node1": 1}
        with db.session_scope(sessions) as session:
            row = build_job(session, "rmA", rsl, lower(rsl)[0], {"user": "u"},
                            datetime.now(timezone.utc), Outbox())
            row.nodes_allocated, row.launch_token = nodes, token
            job_id = row.id
        return requests_for(job_id, "rmA", token, lower(rsl)[0].to_dict(), nodes, 60)[0]

    yield sessions, job
    db.dispose_engines()


def _state(sessions, job_id):
    from grid_tasks import db

    with db.session_scope(sessions) as session:
        row = db.repository.get_job(session, job_id)
        history = [h.to_state for h in db.repository.job_history(session, job_id)]
        return row, history


def _done(code: int = 0) -> dict:
    return {"node1": {"exit_codes": {"0": code}, "reason": None, "code": None}}


def test_one_batch_starts_ends_and_accounts_many_jobs(db_grid):
    from grid_tasks.db import AccountingRecord
    from grid_tasks.gram.report_writer import FINISHED, STARTED, Report, write_reports

    sessions, job = db_grid
    reqs = [job() for _ in range(5)]
    batch = [Report(STARTED, r) for r in reqs] + [Report(FINISHED, r, _done(i))
                                                  for i, r in enumerate(reqs)]
    outbox = write_reports(sessions, batch)
    for i, req in enumerate(reqs):
        row, history = _state(sessions, req.job_id)
        assert row.state is JobState.DONE and row.exit_code == i
        assert history == [JobState.PENDING, JobState.ACTIVE, JobState.DONE]
    events = [(e.job, e.state) for e in outbox.events]
    assert events == [(r.job_id, "ACTIVE") for r in reqs] + [(r.job_id, "DONE") for r in reqs]
    with sessions() as session:
        accounted = {a.job_id for a in session.query(AccountingRecord)}
    assert accounted == {r.job_id for r in reqs}
    assert outbox.rms == set()  # nothing else waits on rmA: no iteration needed


def test_a_job_ending_with_a_grid_reservation_triggers_its_rm(db_grid):
    # nothing else waits on rmA, but the iteration must drop the reservation now and
    # free the broker's tokens, not when the reservation would have ended
    from datetime import timedelta

    from grid_tasks import db
    from grid_tasks.gram.report_writer import FINISHED, STARTED, Report, write_reports

    sessions, job = db_grid
    bound = job()  # the only job: an unbound one ending here triggers nothing (above)
    now = datetime.now(timezone.utc)
    with db.session_scope(sessions) as session:
        session.add(db.Reservation(name="g1", rm="rmA", kind=db.ReservationKind.GRID,
                                   confirmed=True, token="t1", owner_job_id=bound.job_id,
                                   acl={"jobs": []}, nodes=["node1"], start_time=now,
                                   end_time=now + timedelta(hours=1), resources={}))
    outbox = write_reports(sessions, [Report(STARTED, bound), Report(FINISHED, bound, _done())])
    assert outbox.rms == {"rmA"}


def test_checks_per_job_superseded_repeated_and_unknown(db_grid):
    from grid_tasks.gram.report_writer import FINISHED, STARTED, Report, write_reports

    sessions, job = db_grid
    stale, fine, waiting = job("old"), job(), job()
    stale.token = "new-launch-token"  # this launch was superseded (requeued meanwhile)
    unknown = job()
    unknown.job_id = 10**6
    outbox = write_reports(sessions, [
        Report(STARTED, stale), Report(FINISHED, stale, _done()),
        Report(FINISHED, fine, _done(3)), Report(FINISHED, fine, _done(4)),  # repeat
        Report(FINISHED, unknown, _done())])
    row, history = _state(sessions, stale.job_id)
    assert row.state is JobState.PENDING and history == [JobState.PENDING]
    row, history = _state(sessions, fine.job_id)
    assert row.state is JobState.DONE and row.exit_code == 3  # the first ending stands
    assert history == [JobState.PENDING, JobState.ACTIVE, JobState.DONE]
    assert _state(sessions, waiting.job_id)[0].state is JobState.PENDING
    assert outbox.rms == {"rmA"}  # jobs still wait: the freed node matters


def test_reports_queued_during_a_send_go_in_one_message_and_a_failure_reaches_them(
        db_grid):
    """The node side: the first report is sent alone; the five queued meanwhile go in one
    message; a publish that fails reaches every job manager of its batch."""
    import time

    from grid_tasks.gram.report_sender import FINISHED, Report, ReportSender

    _, job = db_grid
    first, *rest = [job() for _ in range(6)]
    sizes: list[int] = []
    sender: ReportSender

    def send(batch):
        sizes.append(len(batch))
        if len(sizes) == 1:  # the first send lasts until the others have queued
            deadline = time.monotonic() + 30
            while len(sender._pending) < 5 and time.monotonic() < deadline:
                time.sleep(0.01)
        else:
            raise ConnectionError("broker gone for good")

    sender = ReportSender(send)
    errors: dict[int, BaseException] = {}

    def report(req):
        try:
            sender.write(Report(FINISHED, req, _done()))
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            errors[req.job_id] = exc

    threads = [threading.Thread(target=report, args=(first,))]
    threads[0].start()
    while not sizes:
        time.sleep(0.01)
    threads += [threading.Thread(target=report, args=(r,)) for r in rest]
    for t in threads[1:]:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sizes == [1, 5]
    assert set(errors) == {r.job_id for r in rest}
    assert all("broker gone" in str(e) for e in errors.values())


def test_a_batch_failing_on_one_report_records_the_others_one_by_one(db_grid, monkeypatch):
    """The gatekeeper side: a report that cannot be written fails alone."""
    import grid_tasks.gram.report_writer as rw
    from grid_tasks.db.retry import retrying as _retrying

    sessions, job = db_grid
    bad, *rest = [job() for _ in range(5)]
    sizes: list[int] = []
    real = rw.write_reports

    def spy(s, batch, vet=None):
        sizes.append(len(batch))
        if any(r.req.job_id == bad.job_id for r in batch):
            raise RuntimeError("this report cannot be written")
        return real(s, batch, vet)

    monkeypatch.setattr(rw, "write_reports", spy)
    done = rw.record(sessions, [rw.Report(rw.FINISHED, r, _done()) for r in (bad, *rest)],
                     _retrying)
    assert sizes == [5, 1, 1, 1, 1, 1]
    assert [(r.req.job_id, "cannot be written" in str(e)) for r, e in done.failed] == [
        (bad.job_id, True)]
    assert [e.job for e in done.outbox.events] == [r.job_id for r in rest for _ in (0, 1)]
    for req in rest:
        assert _state(sessions, req.job_id)[0].state is JobState.DONE
    assert _state(sessions, bad.job_id)[0].state is JobState.PENDING


def test_a_redelivered_batch_changes_nothing_twice(db_grid):
    """acks late: a gatekeeper that died after its commit gets the batch again; the
    second recording finds every job already there and writes nothing."""
    from grid_tasks import db
    from grid_tasks.db.retry import retrying as _retrying
    from grid_tasks.gram.report_sender import FINISHED, STARTED, Report, from_wire, to_wire
    from grid_tasks.gram.report_writer import record

    sessions, job = db_grid
    running, ended = job(), job()
    wire = [to_wire(Report(STARTED, running, started=1.0e9)),
            to_wire(Report(STARTED, ended)), to_wire(Report(FINISHED, ended, _done(7)))]
    first = record(sessions, [from_wire(w) for w in wire], _retrying)
    assert len(first.outbox.events) == 3 and not first.refused and not first.failed

    def snapshot():
        with db.session_scope(sessions) as session:
            rows = [db.repository.get_job(session, r.job_id) for r in (running, ended)]
            return ([(r.state, r.version, r.start_time, r.end_time, r.exit_code) for r in rows],
                    [[h.id for h in db.repository.job_history(session, r.id)] for r in rows],
                    session.query(db.AccountingRecord).count())

    before = snapshot()
    again = record(sessions, [from_wire(w) for w in wire], _retrying)
    assert snapshot() == before
    assert again.outbox.events == [] and not again.refused and not again.failed
    assert before[0][1][0] is JobState.DONE and before[0][1][4] == 7 and before[2] == 1


def test_a_lost_race_is_retried_as_a_whole(db_grid, monkeypatch):
    from grid_tasks import db
    from grid_tasks.db import ConcurrentUpdateError
    import grid_tasks.gram.report_writer as rw
    from grid_tasks.db.retry import retrying as _retrying

    sessions, job = db_grid
    req = job()
    real, raced = rw._finished, []

    def finished_while_another_writer_commits(session, row, *args):
        if not raced:  # after the batch read the row, another session changes it
            raced.append(1)
            with db.session_scope(sessions) as other:
                db.repository.get_job(other, req.job_id).priority = 5
        return real(session, row, *args)

    monkeypatch.setattr(rw, "_finished", finished_while_another_writer_commits)
    with pytest.raises(ConcurrentUpdateError):
        rw.write_reports(sessions, [rw.Report(rw.FINISHED, req, _done())])
    assert _state(sessions, req.job_id)[0].state is JobState.PENDING  # nothing half-done
    outbox = _retrying(lambda: rw.write_reports(sessions, [rw.Report(rw.FINISHED, req,
                                                                      _done())]))
    row, _ = _state(sessions, req.job_id)
    assert row.state is JobState.DONE and row.priority == 5 and outbox.events


def test_a_failed_part_ends_the_job_as_finish_would_record_it(db_grid):
    """The batched rows get what ``records.finish`` gives an ORM row: FAILED with the
    part's reason and GRAM error, exit codes kept, accounting, one version step."""
    from grid_tasks import db
    from grid_tasks.gram.report_writer import FINISHED, STARTED, Report, write_reports
    from grid_tasks.rsl import GramError

    sessions, job = db_grid
    req = job(nodes={"node1": 1, "node2": 1})
    with db.session_scope(sessions) as session:
        version = db.repository.get_job(session, req.job_id).version
    t0 = datetime.now(timezone.utc).timestamp()
    write_reports(sessions, [Report(STARTED, req, started=t0)])
    parts = {"node1": {"exit_codes": {"0": 0}, "reason": None, "code": None},
             "node2": {"exit_codes": {"1": 137}, "reason": "exceeded max_wall_time of 1 s",
                       "code": "JOB_EXECUTION_FAILED"}}
    outbox = write_reports(sessions, [Report(FINISHED, req, parts)])
    row, history = _state(sessions, req.job_id)
    assert row.state is JobState.FAILED and row.maui_state.value == "Removed"
    assert row.failure_reason == "exceeded max_wall_time of 1 s"
    assert (row.gram_error, row.gram_error_code) == (
        "JOB_EXECUTION_FAILED", GramError("JOB_EXECUTION_FAILED").number)
    assert row.exit_code == 137 and row.request["exit_codes"] == {"0": 0, "1": 137}
    assert row.request["executable"] == "/bin/true"  # the rest of the request kept
    assert abs(row.start_time.timestamp() - t0) < 1e-3 and row.end_time >= row.start_time
    assert row.version == version + 2  # one step per committed batch, as a flush takes
    assert history == [JobState.PENDING, JobState.ACTIVE, JobState.FAILED]
    assert [(e.state, e.reason) for e in outbox.events] == [
        ("FAILED", "exceeded max_wall_time of 1 s")]
    with sessions() as session:
        (acct,) = session.query(db.AccountingRecord).filter_by(job_id=req.job_id).all()
        assert acct.final_state is JobState.FAILED and acct.exit_status == 137
        assert acct.nodes == {"node1": 1, "node2": 1} and acct.user == "u"
        assert acct.wall_seconds == pytest.approx(
            (row.end_time - row.start_time).total_seconds())
        assert acct.proc_seconds == pytest.approx(acct.wall_seconds * row.procs)
