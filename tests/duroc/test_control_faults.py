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


def _held_header(settings: Any, job_id: int, address: int, timeout: float = 30) -> str:
    """The task id of the header watching ``address``, once a worker holds its message
    unacknowledged (kombu's unacked hash)."""
    import json

    import redis

    broker = redis.Redis.from_url(settings.broker_url)
    needle = f"coalloc-{job_id}/{address}".encode()
    deadline = time.monotonic() + timeout
    try:
        while True:
            for raw in broker.hvals("unacked"):
                if needle in raw:
                    return str(json.loads(raw)[0]["headers"]["id"])
            assert time.monotonic() < deadline, f"header {needle!r} never held"
            time.sleep(0.05)
    finally:
        broker.close()


@pytest.mark.slow
def test_gatekeeper_sigkill_mid_header_is_redelivered(duroc_grid, tmp_path):
    """acks-late + reject-on-worker-lost: the very message of a header held by a killed
    gatekeeper comes back redelivered and runs on a new gatekeeper; the job ends DONE.

    A header only submits its subjob now (nothing waits in it), so "mid-header" is made
    exact: the test holds the database's write lock, the header blocks in its submission
    (its message unacknowledged), and the gatekeeper is killed right then."""
    import sqlite3

    out = tmp_path / "m"
    out.mkdir()
    grid, prog, settings = duroc_grid.grid, program(tmp_path), duroc_grid.settings
    assert settings.database_url.startswith("sqlite:///")
    rsl = "+" + component("rmA", "a", 1, prog, out) + component("rmB", "b", 1, prog, out)
    victim = duroc_grid.gatekeepers["rmB"].pid
    os.kill(victim, signal.SIGSTOP)  # b's header waits until the lock below is held
    lock = sqlite3.connect(settings.database_url[len("sqlite:///"):], isolation_level=None,
                           timeout=30)
    try:
        job = grid.job_request(rsl, barrier_timeout=200)
        lock.execute("BEGIN IMMEDIATE")  # every writer waits (busy timeout 30 s)
        os.kill(victim, signal.SIGCONT)
        task_id = _held_header(settings, job.id, 1)
        deadline = time.monotonic() + 10  # it ran as far as its submission's write
        while not Coallocator(grid.services).header_deliveries(job.id).get(1):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        os.kill(victim, signal.SIGKILL)
    finally:
        lock.rollback()
        lock.close()
    assert Coallocator(grid.services).header_deliveries(job.id)[1]["redelivered"] == 0
    duroc_grid.gatekeepers.update(start_gatekeepers(duroc_grid, ("rmB",)))
    # back after the broker's visibility timeout (30 s here), flagged redelivered
    deadline = time.monotonic() + 120
    while Coallocator(grid.services).header_deliveries(job.id)[1]["redelivered"] < 1:
        assert time.monotonic() < deadline, Coallocator(grid.services).header_deliveries(job.id)
        time.sleep(0.5)
    assert Coallocator(grid.services).header_deliveries(job.id)[1]["task"] == task_id
    final = job.wait(timeout=60)
    assert final.state is JobState.DONE, final
    assert markers(out) == ["a-0", "b-0"]
