"""Faults on a live grid: a node daemon SIGKILLed mid-job, under both node failure policies."""

from __future__ import annotations

import os
import signal
import time

import pytest

from grid_tasks.states import JobState
from tests.waiting import until


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry}/stat") as f:
                zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if marker in cmd and not zombie and "pytest" not in cmd:
            found.append(int(entry))
    return found



def _kill_node(module_grid, node: str) -> None:
    child = module_grid.children[node]
    os.killpg(child.pid, signal.SIGKILL)
    child.process.wait(10)


def test_worker_sigkill_leaves_no_orphan_and_fails_the_job(module_grid):
    grid = module_grid.grid
    job = grid.submit("&(executable=/bin/sleep)(arguments=297.25)", rm="rmB")
    until(lambda: job.status().state is JobState.ACTIVE, 20, "ACTIVE")
    assert _processes_with("sleep 297.25")
    killed_at = time.monotonic()
    _kill_node(module_grid, "node3")
    until(lambda: not _processes_with("sleep 297.25"), 5, "the job's process to die")
    status = job.wait(timeout=60)
    assert time.monotonic() - killed_at < 60
    assert status.state is JobState.FAILED and status.gram_error == "JM_STOPPED"
    assert "node3 lost" in status.reason
    module_grid.start_node("rmB", "node3")


@pytest.fixture
def requeue_grid(redis_server, tmp_path_factory):
    """A grid whose scheduler (its own process, as in production) has the REQUEUE policy."""
    from tests.gram.conftest import _live_grid

    yield from _live_grid(redis_server, tmp_path_factory, None,
                          extra_env={"GRID_TASKS_NODE_FAILURE_POLICY": "REQUEUE"})


@pytest.mark.slow  # ~15 s; the FAIL policy test above covers the detection path by default
def test_requeue_policy_runs_the_job_again(requeue_grid):
    grid = requeue_grid.grid
    job = grid.submit("&(executable=/bin/sleep)(arguments=297.5)", rm="rmB")
    until(lambda: job.status().state is JobState.ACTIVE, 20, "ACTIVE")
    _kill_node(requeue_grid, "node3")
    until(lambda: job.status().state is JobState.PENDING, 60, "requeue")
    assert any("requeued" in (h.reason or "") for h in job.history())
    requeue_grid.start_node("rmB", "node3")
    until(lambda: job.status().state is JobState.ACTIVE, 30, "ACTIVE again")
    job.cancel()
    assert job.wait(timeout=20).gram_error == "USER_CANCELLED"
    assert not _processes_with("sleep 297.5")
