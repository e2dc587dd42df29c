"""A job part as Flower sees it (grid_tasks.gram.monitor): its task events, sent
through a real broker and received as Flower receives them."""

from __future__ import annotations

import json

from grid_tasks.gram.launch import LaunchRequest
from grid_tasks.gram.monitor import JobTask, task_id, task_name
from tests.metrics.flower_live import TaskEvents
from tests.waiting import until


def _req(job: int, run_as: str | None = None) -> LaunchRequest:
    return LaunchRequest(job_id=job, rm="rmA", node="node1", token="t0", executable="/bin/true",
                         tasks=2, rank_offset=0, size=2, nodes=1, run_as=run_as)


def _ended(seen: TaskEvents, req: LaunchRequest) -> list[dict]:
    until(lambda: any(e["type"] in ("task-succeeded", "task-failed") for e in seen.events
                      if e.get("uuid") == task_id(req)), 10, "the part's end")
    return [e for e in seen.events if e.get("uuid") == task_id(req)]


def test_a_part_is_received_started_then_ends_with_how_the_job_ended(celery_app_factory):
    app = celery_app_factory()
    done, failed, crashed = _req(1, run_as="alice"), _req(2), _req(3)
    with TaskEvents(app) as seen:
        for req, outcome in ((done, ({"0": 0, "1": 0}, None, None)),
                             (failed, ({"0": 3}, None, None)),
                             (crashed, ({}, "job manager failed on node1: boom", "JM_STOPPED"))):
            shown = JobTask(app, req, "node1.rmA@host")
            shown.started()
            shown.ended(*outcome)
        events = {req.job_id: _ended(seen, req) for req in (done, failed, crashed)}
    assert task_name(done) == "job 1 (alice) on rmA/node1"
    assert task_name(failed) == "job 2 on rmA/node1"
    first = events[1]
    assert [e["type"] for e in first] == ["task-received", "task-started", "task-succeeded"]
    assert {e["hostname"] for e in first} == {"node1.rmA@host"}  # the node's worker
    assert first[0]["name"] == "job 1 (alice) on rmA/node1"
    assert "tasks=2" in first[0]["args"] and "executable='/bin/true'" in first[0]["args"]
    assert json.loads(first[-1]["result"])["exit_codes"] == {"0": 0, "1": 0}
    # the program failing is the user's outcome; the job manager crashing is the grid's
    assert events[2][-1]["type"] == "task-succeeded"
    assert json.loads(events[2][-1]["result"])["exit_codes"] == {"0": 3}
    assert events[3][-1]["type"] == "task-failed"
    assert events[3][-1]["exception"].startswith("JM_STOPPED: job manager failed")


def test_a_part_that_never_started_shows_once_ended_and_none_without_a_worker(
        celery_app_factory):
    app = celery_app_factory()
    refused, outside = _req(4), _req(5)
    with TaskEvents(app) as seen:
        JobTask(app, outside, None).ended({}, "nope", "EXECUTABLE_NOT_FOUND")
        JobTask(app, refused, "node1.rmA@host").ended({}, "executable /x not found",
                                                       "EXECUTABLE_NOT_FOUND")
        events = _ended(seen, refused)
    assert [e["type"] for e in events] == ["task-received", "task-succeeded"]
    assert "executable /x not found" in events[-1]["result"]
    assert not [e for e in seen.events if e.get("uuid") == task_id(outside)]
