"""The GRAM flow on PostgreSQL (runs when GRID_TASKS_TEST_POSTGRES_URL is set)."""

from __future__ import annotations

import pytest

from grid_tasks.states import JobState

pytestmark = pytest.mark.postgres


def test_submit_run_cancel_on_postgres(postgres_grid):
    grid = postgres_grid.grid
    job = grid.submit("&(executable=/bin/sh)(arguments=-c 'echo $GRID_TASKS_RANK')(count=2)",
                      rm="rmA")
    status = job.wait(timeout=30)
    assert status.state is JobState.DONE and status.exit_codes == {"0": 0, "1": 0}
    assert sorted(job.output().split()) == ["0", "1"]
    hog = grid.submit("&(executable=/bin/sleep)(arguments=30)(count=8)", rm="rmA")
    queued = grid.submit("&(executable=/bin/true)", rm="rmA")
    hog.cancel()
    assert hog.wait(timeout=20).gram_error == "USER_CANCELLED"
    assert queued.wait(timeout=20).state is JobState.DONE
    assert [h.to_state for h in job.history()] == [JobState.PENDING, JobState.ACTIVE,
                                                    JobState.DONE]
