"""showq at depth: a page of each section from Core rows, with every job counted.

A few thousand jobs are inserted in one statement; the paged queue must list exactly
the rows the full listing has at the same places, count what it does not list, and
read the scheduler's ranking once per RM (where a cached plan plugs in).
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest
from sqlalchemy import event

from grid_tasks.ops import build_queue
from grid_tasks.ops.plan_digest import Ranked
from grid_tasks.ops.render import queue_view
from grid_tasks.ops.timefmt import OpsError
from grid_tasks.states import JobState, MauiJobState

from .conftest import NOW
from .test_queue_coalloc import text_of


@pytest.fixture
def deep(session, add_job, bulk_jobs):
    """rmA: 2 running jobs, 1,500 idle, 40 held, 30 waiting on an unfinished job, 20
    deferred, 10 whose dependency is done (idle); rmB: 300 idle."""
    runner = add_job("rmA", user="ann", state=JobState.ACTIVE, tasks=2, nodes={"a1": 2},
                     walltime=3600, started=-600)
    add_job("rmA", user="ann", state=JobState.ACTIVE, tasks=4, nodes={"a2": 4},
            walltime=7200, started=-60)
    finished = add_job("rmA", state=JobState.DONE, started=-5000, ended=-4000)
    ids = {"idle": bulk_jobs("rmA", 1500)}
    ids["held"] = bulk_jobs("rmA", 40, holds=["user"])
    ids["waits"] = bulk_jobs("rmA", 30, dependencies=[runner.id])
    ids["deferred"] = bulk_jobs("rmA", 20, maui_state=MauiJobState.DEFERRED)
    ids["met"] = bulk_jobs("rmA", 10, dependencies=[finished.id])
    ids["rmB"] = bulk_jobs("rmB", 300)
    return ids


def test_pages_partition_the_full_listing(session, deep):
    full = build_queue(session, "rmA", NOW)
    assert full.complete and len(full.idle) == 1510 and len(full.blocked) == 90
    pages = [build_queue(session, "rmA", NOW, limit=400, page=p) for p in (1, 2, 3, 4, 5)]
    assert [r.job_id for p in pages for r in p.idle] == [r.job_id for r in full.idle]
    assert [r.to_dict() for p in pages for r in p.idle] == [r.to_dict() for r in full.idle]
    assert [r.job_id for r in pages[0].blocked] == [r.job_id for r in full.blocked]
    assert [len(p.idle) for p in pages] == [400, 400, 400, 310, 0]
    for page in pages:
        assert page.summary() == full.summary()
        assert not page.complete
    assert full.summary()["idle_jobs"] == 1510 and full.summary()["blocked_jobs"] == 90
    assert full.summary()["procs_active"] == 6 and full.summary()["nodes_active"] == 2
    whole = build_queue(session, None, NOW, limit=50)
    assert whole.summary()["idle_jobs"] == 1810 and whole.total_jobs == 1902


def test_blocked_and_active_pages(session, deep):
    full = build_queue(session, "rmA", NOW)
    second = build_queue(session, "rmA", NOW, limit=25, page=2)
    assert [r.job_id for r in second.blocked] == [r.job_id for r in full.blocked][25:50]
    assert second.active == []  # two running jobs: all on page 1
    assert {r.state for r in full.blocked} == {"Hold", "Blocked", "Deferred"}
    assert set(deep["met"]) <= {r.job_id for r in full.idle}


def test_ranking_is_read_once_per_rm_and_orders_the_page(session, deep):
    asked: list[str] = []
    # a ranking putting the newest idle jobs first, whatever the scheduler thinks
    newest = {job_id: (float(i), 0.0) for i, job_id in enumerate(deep["idle"])}

    def ranking(rm: str):
        asked.append(rm)
        return Ranked.of(newest if rm == "rmA" else {})

    queue = build_queue(session, None, NOW, limit=5, ranking=ranking)
    assert sorted(asked) == ["rmA", "rmB"]
    assert [r.job_id for r in queue.idle] == deep["idle"][::-1][:5]
    assert [r.priority for r in queue.idle] == [1499.0, 1498.0, 1497.0, 1496.0, 1495.0]


def test_table_says_which_rows_it_shows(session, deep):
    text = text_of(queue_view(build_queue(session, "rmA", NOW, limit=20, page=2)))
    assert "rows 21-40 of 1510 idle jobs (--page 3 for the next, --all for every row)" in text
    assert "rows 21-40 of 90 blocked jobs" in text
    assert "Total Jobs: 1602   Active Jobs: 2   Idle Jobs: 1510   Blocked Jobs: 90" in text
    assert text.count("│ Idle ") == 20


def test_small_queue_prints_as_before(session, add_job):
    add_job("rmA", user="bob")
    text = text_of(queue_view(build_queue(session, "rmA", NOW, limit=50)))
    assert "rows " not in text and "--all" not in text
    assert text == text_of(queue_view(build_queue(session, "rmA", NOW)))


def test_bad_page_is_refused(session):
    with pytest.raises(OpsError, match="page and limit must be at least 1"):
        build_queue(session, "rmA", NOW, limit=10, page=0)


def test_long_section_prints_plain_aligned_lines(session, deep):
    """Past PLAIN_ROWS a section is plain columns (fast to print, easy to grep)."""
    text = text_of(queue_view(build_queue(session, "rmA", NOW)))
    idle_part = text.split("IDLE JOBS")[1].split("BLOCKED JOBS")[0]
    lines = [line for line in idle_part.splitlines() if line.strip()]
    assert lines[0].split() == ["JOBNAME", "USERNAME", "STATE", "PROC", "WCLIMIT",
                                "QUEUETIME", "RM"]
    jobs = [line.split() for line in lines if line.split()[0].isdigit() and "Jobs" not in line]
    assert len(jobs) == 1510 and {j[2] for j in jobs} == {"Idle"} and "│" not in idle_part
    assert len({len(line) for line in lines[1:6]}) == 1  # aligned
    assert "┏" in text.split("BLOCKED JOBS")[1]  # the short section stays a table


@contextmanager
def statements(session):
    """The SQL texts executed on the session's engine while the block runs."""
    seen: list[str] = []

    def record(conn, cursor, statement, *args):
        seen.append(statement)
    engine = session.get_bind()
    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def test_a_page_reads_by_index_when_the_ranking_knows_its_flagged_jobs(session, deep):
    """A ranking that names its queued jobs with a hold or dependency (a kept plan's)
    spares the page the pass over the queue's JSON; the page is the same."""
    flagged = frozenset(deep["held"] + deep["waits"] + deep["met"])
    plain = build_queue(session, "rmA", NOW, limit=40, page=2)
    prio = {r.job_id: (r.priority, r.submit_time.timestamp()) for r in
            build_queue(session, "rmA", NOW).idle}
    prio.update({i: (0.0, 0.0) for i in deep["held"] + deep["waits"]})
    for known in (flagged, None):
        with statements(session) as seen:
            got = build_queue(session, "rmA", NOW, limit=40, page=2,
                              ranking=lambda rm: Ranked.of(prio, known))
        assert [r.to_dict() for r in got.idle] == [r.to_dict() for r in plain.idle]
        assert [r.to_dict() for r in got.blocked] == [r.to_dict() for r in plain.blocked]
        assert got.summary() == plain.summary()
        scans = [s for s in seen if "CAST(jobs.holds AS" in s]
        assert len(scans) == (0 if known is not None else 1)


def test_a_job_of_no_rm_is_listed_on_the_page_as_in_the_full_listing(session, add_job,
                                                                       bulk_jobs):
    bulk_jobs("rmA", 5)
    stray = add_job(None, user="zed", submitted=-9000)
    full = build_queue(session, None, NOW)
    page = build_queue(session, None, NOW, limit=3)
    assert stray.id in [r.job_id for r in full.idle]
    assert [r.job_id for r in page.idle] == [r.job_id for r in full.idle][:3]
    assert page.summary() == full.summary()
