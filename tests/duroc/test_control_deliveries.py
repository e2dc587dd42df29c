"""Header task deliveries counted beside the coordination store (the redelivery proof),
and what a header's run reads in that same round trip."""

from __future__ import annotations

import pytest
from sqlalchemy import event

from grid_tasks import db
from grid_tasks.client import Grid
from grid_tasks.duroc.control import Coallocator
from grid_tasks.duroc.control_rows import DELIVERIES_KEY, FACTS_KEY, URL_KEY, submission_facts
from grid_tasks.duroc.errors import CoallocFinishedError
from grid_tasks.duroc.records import store_id
from grid_tasks.duroc.store_models import SubjobSpec
from grid_tasks.embedded.stack import prepare_database
from grid_tasks.settings import Settings
from grid_tasks.topology import load_topology

RSL = ("+(&(resourceManagerContact=rmA)(label=a)(count=1)(executable=/bin/true))"
       "(&(resourceManagerContact=rmB)(label=b)(count=2)(executable=/bin/echo)"
       "(arguments=x)(subjobStartType=loose-barrier))")


def test_runs_and_redeliveries_are_counted_per_subjob(settings: Settings) -> None:
    grid = Grid(settings)
    try:
        co = Coallocator(grid)
        co.store.create_job(store_id(7), [SubjobSpec("a", 1), SubjobSpec("b", 1)])
        first = co.note_delivery(7, 0, "task-0", redelivered=False)
        assert first.url is None  # no URL yet
        assert first.facts is None  # none stored: the submission reads SQL
        # the store's snapshot came in the same round trip
        assert [s.label for s in co.store.snapshot_reply(store_id(7), first.snapshot)
                .subjobs] == ["a", "b"]
        co.store.client.set(URL_KEY.format(7), "redis://job-7@host/3")
        # the job's runtime URL comes back with the count (the header's submission needs it)
        again = co.note_delivery(7, 0, "task-0", redelivered=True)
        assert again.url == b"redis://job-7@host/3"
        co.note_delivery(7, 1, "task-1", redelivered=False)
        assert co.header_deliveries("duroc://coalloc/7") == {
            0: {"runs": 2, "redelivered": 1, "task": "task-0"},
            1: {"runs": 1, "redelivered": 0, "task": "task-1"}}
        assert co.header_deliveries(8) == {}
        assert 0 < co.store.client.ttl(DELIVERIES_KEY.format(7)) <= 24 * 3600
        gone = co.note_delivery(9, 0, None, redelivered=False)  # no such job in the store
        with pytest.raises(CoallocFinishedError, match="coallocated job 9 is gone"):
            co.watch_step(9, 0, deadline=0.0, delivery=gone)
        co.store.close()
    finally:
        grid.close()


def test_a_first_run_gets_the_sql_facts_from_the_store_and_later_runs_read_sql(
        settings: Settings) -> None:
    prepare_database(settings, load_topology(settings.topology_file))
    grid = Grid(settings)
    try:
        job = grid.job_request(RSL, barrier_timeout=60)
        co = grid.coallocator
        assert 0 < co.store.client.ttl(FACTS_KEY.format(job.id)) <= 60 + 24 * 3600
        for address in (0, 1):
            with db.session_scope(grid.sessions) as session:
                row = submission_facts(session, job.id, address)
            facts = co.note_delivery(job.id, address, None, redelivered=False).facts
            assert facts is not None
            for name in ("gram_job_id", "rsl", "rm", "label", "owner", "barrier_timeout"):
                assert getattr(facts, name) == getattr(row, name), name
            # a second run (a retry: the first may have submitted) reads SQL again
            assert co.note_delivery(job.id, address, None, redelivered=False).facts is None
        # a redelivered first run too: its worker died, maybe after submitting
        assert co.note_delivery(job.id, 5, None, redelivered=True).facts is None
        co.job_cancel(job.id)
        co.store.close()
    finally:
        grid.close()
        db.dispose_engines(settings.database_url)


def test_a_header_with_its_facts_reads_no_subjob_row_before_submitting(
        settings: Settings) -> None:
    prepare_database(settings, load_topology(settings.topology_file))
    grid = Grid(settings)
    statements: list[str] = []
    try:
        job = grid.job_request(RSL, barrier_timeout=60)
        co = grid.coallocator
        delivery = co.note_delivery(job.id, 0, None, redelivered=False)
        engine = db.get_engine(settings.database_url)

        def seen(conn, cursor, statement, *args) -> None:  # noqa: ANN001
            statements.append(" ".join(statement.split()).lower())

        event.listen(engine, "before_cursor_execute", seen)
        try:
            gram_id, stored = co.submit_subjob(job.id, 0, url=delivery.url,
                                               facts=delivery.facts)
        finally:
            event.remove(engine, "before_cursor_execute", seen)
        assert stored
        first_write = next(i for i, s in enumerate(statements) if s.startswith("insert"))
        assert not [s for s in statements[:first_write] if "from subjobs" in s]
        with db.session_scope(grid.sessions) as session:  # linked all the same
            assert submission_facts(session, job.id, 0).gram_job_id == gram_id
        assert co.submit_subjob(job.id, 0) == (gram_id, False)  # idempotent, from SQL
        co.job_cancel(job.id)
        co.store.close()
    finally:
        grid.close()
        db.dispose_engines(settings.database_url)
