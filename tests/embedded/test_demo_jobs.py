"""The GRAM part of ``grid-tasks demo``: its job list and live showq table."""

from __future__ import annotations

from rich.console import Console

from grid_tasks.client import JobStatus
from grid_tasks.embedded.demo_jobs import DEMO_JOBS, showq_table
from grid_tasks.rsl import lower
from grid_tasks.states import JobState, MauiJobState


def test_demo_jobs_are_valid_single_requests_on_both_demo_rms():
    assert {rm for rm, _, _ in DEMO_JOBS} == {"rmA", "rmB"}
    for _, rsl, _ in DEMO_JOBS:
        assert len(lower(rsl)) == 1


def test_showq_table_shows_states_nodes_and_results():
    rows = [JobStatus(1, "gram://rmA/jobs/1", "rmA", JobState.DONE, MauiJobState.COMPLETED,
                      exit_code=0, nodes={"node2": 1, "node1": 2}),
            JobStatus(2, "gram://rmB/jobs/2", "rmB", JobState.FAILED, MauiJobState.REMOVED,
                      reason="executable /x not found on node4"),
            JobStatus(3, "gram://rmA/jobs/3", "rmA", JobState.PENDING, MauiJobState.IDLE)]
    console = Console(record=True, width=120)
    console.print(showq_table(rows, "live"))
    text = console.export_text()
    assert "node1:2,node2:1" in text and "exit 0" in text
    assert "executable /x not found on node4" in text and "Idle" in text
