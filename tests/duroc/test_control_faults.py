"""DUROC faults with real processes: node daemon or gatekeeper SIGKILLed before the barrier."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

from grid_tasks.duroc.control import Coallocator
from grid_tasks.states import JobState
from tests.duroc.live import component, markers, program, start_gatekeepers

pytestmark = pytest.mark.timeout(300)


def _wait_entered(job: Any, label: str, count: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while (job.status().subjob(label).entered or 0) < count:
        assert time.monotonic() < deadline, job.status()
        time.sleep(0.1)


def _wait_gram_started(grid: Any, job: Any, label: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        sub = job.status().subjob(label)
        if sub.gram_job is not None and grid.status(sub.gram_job).state is JobState.ACTIVE:
            return
        assert time.monotonic() < deadline, job.status()
        time.sleep(0.1)


def _assert_all_ended(grid: Any, status: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    for sub in status.subjobs:
        while sub.gram_job is not None and not grid.status(sub.gram_job).state.terminal:
            assert time.monotonic() < deadline, sub
            time.sleep(0.1)


def test_node_daemon_sigkill_before_barrier_fails_whole_job(duroc_grid, tmp_path):
    out = tmp_path / "m"
    out.mkdir()
    grid, prog = duroc_grid.grid, program(tmp_path)
    rsl = "+" + component("rmA", "waits", 2, prog, out) + \
        component("rmB", "victim", 1, prog, out, "pre60")
    job = grid.job_request(rsl, barrier_timeout=120)
    _wait_entered(job, "waits", 2)
    _wait_gram_started(grid, job, "victim")
    started = time.monotonic()
    os.kill(duroc_grid.children["node3"].pid, signal.SIGKILL)
    try:
        final = job.wait(timeout=60)
        assert time.monotonic() - started < 60
        assert final.state is JobState.FAILED and "'victim'" in final.reason, final
        _assert_all_ended(grid, final)
        assert markers(out) == []
    finally:
        duroc_grid.start_node("rmB", "node3")


def _wait_header_delivered(grid: Any, job: Any, address: int, timeout: float = 90) -> str:
    """The task id of the header task watching ``address``, once it ran at least once."""
    deadline = time.monotonic() + timeout
    while True:
        found = Coallocator(grid.services).header_deliveries(job.id).get(address, {})
        if found.get("runs") and found.get("task"):
            return str(found["task"])
        assert time.monotonic() < deadline, Coallocator(grid.services).header_deliveries(job.id)
        time.sleep(0.1)


def _kill_holding(settings: Any, pid: int, task_id: str, timeout: float = 60) -> None:
    """SIGKILL worker ``pid`` at a moment it holds ``task_id`` unacknowledged.

    The header task re-queues itself every slice, so "mid-header" is made exact:
    freeze the worker (SIGSTOP stops all its threads), look in kombu's unacked hash,
    kill if the task's message is there, else let it run on and look again.
    """
    import redis

    broker = redis.Redis.from_url(settings.broker_url)
    deadline = time.monotonic() + timeout
    try:
        while True:
            os.kill(pid, signal.SIGSTOP)
            held = any(task_id.encode() in raw for raw in broker.hvals("unacked"))
            if held:
                os.kill(pid, signal.SIGKILL)
                return
            os.kill(pid, signal.SIGCONT)
            assert time.monotonic() < deadline, f"task {task_id} never held by worker {pid}"
            time.sleep(0.05)
    finally:
        broker.close()


@pytest.mark.slow
def test_gatekeeper_sigkill_mid_header_is_redelivered(duroc_grid, tmp_path):
    """acks-late + reject-on-worker-lost: the very message of the killed header task comes
    back redelivered and the watch resumes on a new gatekeeper; the job ends DONE."""
    out = tmp_path / "m"
    out.mkdir()
    grid, prog = duroc_grid.grid, program(tmp_path)
    rsl = "+" + component("rmA", "a", 1, prog, out) + component("rmB", "b", 1, prog, out,
                                                                  "pre25")
    job = grid.job_request(rsl, barrier_timeout=200)
    _wait_gram_started(grid, job, "b", timeout=90)
    task_id = _wait_header_delivered(grid, job, 1)
    assert job.status().subjob("b").entered == 0  # still before the barrier: mid-header
    assert Coallocator(grid.services).header_deliveries(job.id)[1]["redelivered"] == 0
    _kill_holding(duroc_grid.settings, duroc_grid.gatekeepers["rmB"].pid, task_id)
    duroc_grid.gatekeepers.update(start_gatekeepers(duroc_grid, ("rmB",)))
    # The barrier opens in the store without the header (auto-release), so the job may
    # end first: the proof is the header's own message coming back, flagged redelivered
    # (after the broker's visibility timeout, 30 s here).
    deadline = time.monotonic() + 120
    while Coallocator(grid.services).header_deliveries(job.id)[1]["redelivered"] < 1:
        assert time.monotonic() < deadline, Coallocator(grid.services).header_deliveries(job.id)
        time.sleep(0.5)
    assert Coallocator(grid.services).header_deliveries(job.id)[1]["task"] == task_id
    final = job.wait(timeout=60)
    assert final.state is JobState.DONE, final
    assert markers(out) == ["a-0", "b-0"]
