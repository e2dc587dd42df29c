"""showq and checkjob of coallocated (DUROC) jobs: rows stored through grid_tasks.db,
barrier entries from a real coordination store on the private Redis."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

from grid_tasks.db import Job
from grid_tasks.db.models import CoallocatedJob, Subjob
from grid_tasks.db.models.jobs import BarrierState
from grid_tasks.duroc.store import CoordinationStore
from grid_tasks.duroc.store_models import SubjobSpec
from grid_tasks.errors import NotFoundError
from grid_tasks.ops import build_queue
from grid_tasks.ops.jobs import check_coalloc, is_coalloc_ref
from grid_tasks.ops.queue import barrier_entries
from grid_tasks.ops.render import coalloc_view, queue_view
from grid_tasks.states import JobState, MauiJobState, SubjobStartType

from .conftest import NOW


def add_coalloc(session: Any, subjobs: list[dict[str, Any]], *,
                state: JobState = JobState.PENDING,
                barrier: BarrierState = BarrierState.WAITING, reason: str | None = None) -> int:
    """Store a coallocated job; each subjob dict: label, rm, start (type), and ``gram``
    (the GRAM job's state, optional ``exit_code``) when it was submitted."""
    row = CoallocatedJob(owner="ann", state=state, barrier_state=barrier, rsl="+(...)",
                         barrier_timeout=300.0, failure_reason=reason, created_at=NOW)
    session.add(row)
    session.flush()
    row.contact = f"duroc://coalloc/{row.id}"
    for address, sub in enumerate(subjobs):
        gram = None
        if "gram" in sub:
            gram = Job(rm=sub["rm"], user="ann", state=sub["gram"], tasks=1, procs=1,
                       maui_state=MauiJobState.RUNNING, exit_code=sub.get("exit_code"),
                       submit_time=NOW, coallocation_id=row.id, coallocation_label=sub["label"])
            session.add(gram)
            session.flush()
        session.add(Subjob(coallocation_id=row.id, position=address, label=sub["label"],
                           rm=sub["rm"], start_type=sub.get("start", SubjobStartType.STRICT_BARRIER),
                           state=JobState.PENDING if gram else JobState.UNSUBMITTED,
                           gram_job_id=gram.id if gram else None))
    session.commit()
    return row.id


def text_of(renderable: Any) -> str:
    console = Console(width=200, record=True)
    console.print(renderable)
    return console.export_text()


SUBJOBS = [{"label": "left", "rm": "rmA", "gram": JobState.ACTIVE},
           {"label": "right", "rm": "rmB", "gram": JobState.DONE, "exit_code": 3,
            "start": SubjobStartType.LOOSE_BARRIER},
           {"label": "late", "rm": "rmB"}]


def test_showq_lists_live_coallocations_with_their_subjobs(session):
    live = add_coalloc(session, SUBJOBS, state=JobState.ACTIVE, barrier=BarrierState.RELEASED)
    add_coalloc(session, [{"label": "x", "rm": "rmA"}], state=JobState.DONE)  # ended: hidden
    only_a = add_coalloc(session, [{"label": "solo", "rm": "rmA"}])
    queue = build_queue(session, None, NOW)
    assert [c.id for c in queue.coallocations] == [live, only_a]
    data = queue.to_dict()
    assert data["summary"]["coallocated_jobs"] == 2
    first = data["coallocations"][0]
    assert (first["contact"], first["state"], first["barrier"]) == (
        f"duroc://coalloc/{live}", "ACTIVE", "released")
    subs = {s["label"]: s for s in first["subjobs"]}
    assert subs["left"]["state"] == "ACTIVE" and subs["left"]["gram_job"] is not None
    # a loose subjob that exited 3 is reported failed, with its reason
    assert (subs["right"]["state"], subs["right"]["reason"], subs["right"]["exit_code"]) == (
        "FAILED", "exit code 3", 3)
    assert subs["right"]["start_type"] == "loose-barrier"
    assert subs["late"]["state"] == "UNSUBMITTED" and subs["late"]["gram_job"] is None
    # per RM: a coallocation shows where any of its subjobs runs
    assert [c.id for c in build_queue(session, "rmB", NOW).coallocations] == [live]


def test_showq_table_has_a_line_per_coallocation_then_indented_subjobs(session):
    job = add_coalloc(session, SUBJOBS)
    text = text_of(queue_view(build_queue(session, None, NOW)))
    assert "COALLOCATED JOBS" in text and "1 Coallocated Job" in text
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if f"duroc://coalloc/{job}" in line)
    assert "barrier waiting" in lines[head] and "PENDING" in lines[head]
    assert "  left" in lines[head + 1] and "rmA" in lines[head + 1] and "-/1" in lines[head + 1]
    assert "  right" in lines[head + 2] and "exit code 3" in lines[head + 2]
    assert "strict-barrier" in lines[head + 1] and "loose-barrier" in lines[head + 2]


def test_showq_without_coallocations_has_no_section(session):
    assert "COALLOCATED" not in text_of(queue_view(build_queue(session, None, NOW)))


def test_barrier_entries_come_from_the_coordination_store(session, settings):
    job = add_coalloc(session, [{"label": "left", "rm": "rmA", "gram": JobState.ACTIVE},
                                {"label": "right", "rm": "rmB", "gram": JobState.ACTIVE}])
    store = CoordinationStore.from_settings(settings)
    try:
        store.create_job(f"coalloc-{job}", [SubjobSpec("left", 2), SubjobSpec("right", 1)])
        store.enter(f"coalloc-{job}", 0, 1)
        entries = barrier_entries(settings)
        got = build_queue(session, None, NOW, entries).coallocations[0].subjobs
        assert [(s.label, s.entered, s.size) for s in got] == [("left", 1, 2), ("right", 0, 1)]
        assert entries(job + 1000) == {}  # no store for that job: unknown, not an error
    finally:
        store.purge(f"coalloc-{job}")
        store.close()


def test_barrier_entries_read_as_unknown_when_redis_is_down(session, settings):
    job = add_coalloc(session, SUBJOBS)
    down = settings.replace(redis_url="redis://127.0.0.1:1/0")
    got = build_queue(session, None, NOW, barrier_entries(down)).coallocations[0]
    assert [s.entered for s in got.subjobs] == [None, None, None]


def test_checkjob_of_a_coallocation_in_detail(session):
    job = add_coalloc(session, SUBJOBS, state=JobState.FAILED, barrier=BarrierState.RELEASED,
                      reason="subjob 'left' failed: exit code 3")
    for ref in (f"duroc://coalloc/{job}", f"coalloc-{job}", job, str(job)):
        report = check_coalloc(session, ref)
        assert report.status.id == job
    data = report.to_dict()
    assert data["state"] == "FAILED" and data["owner"] == "ann"
    assert data["barrier"] == "released" and data["barrier_timeout"] == 300.0
    assert data["reason"] == "subjob 'left' failed: exit code 3"
    assert [s["label"] for s in data["subjobs"]] == ["left", "right", "late"]
    assert data["times"]["created"] is not None and data["rsl"] == "+(...)"
    text = text_of(coalloc_view(report))
    assert f"coallocated job {job}" in text and "exit code 3" in text
    assert "loose-barrier" in text and "independent" not in text


def test_checkjob_of_an_unknown_coallocation(session):
    with pytest.raises(NotFoundError, match="no coallocated job 999"):
        check_coalloc(session, "duroc://coalloc/999")
    with pytest.raises(NotFoundError):
        check_coalloc(session, "duroc://coalloc/x")


def test_coalloc_refs_are_told_from_gram_jobs():
    assert is_coalloc_ref("duroc://coalloc/3") and is_coalloc_ref("coalloc-3")
    assert not is_coalloc_ref("3") and not is_coalloc_ref("https://rmA/jobs/3")
