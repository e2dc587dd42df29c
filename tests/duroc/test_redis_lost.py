"""Issue 21 finding 4: the coordination Redis killed and restarted empty while subjob a
is in the barrier and subjob b still queued.  The job must fail by itself (nobody
looks), within its barrier timeout + 5 s, with a reason that says its coordination
state was lost; b's GRAM job is cancelled in SQL before it ever starts, and never
starts afterwards; no process passes the barrier.

A grid of its own (its own redis-server, killed here with SIGKILL and started again
empty on the same port), so no other test meets a Redis that lost everything."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from grid_tasks import db
from grid_tasks.db.models import CoallocatedJob, Job
from grid_tasks.db.models.jobs import BarrierState as SqlBarrier
from grid_tasks.duroc.settle import LOST_REASON
from grid_tasks.embedded.redis_server import RedisServer
from grid_tasks.states import JobState
from tests.duroc.live import component, markers, program, start_gatekeepers
from tests.waiting import until

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def lost_grid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    import gc

    from tests.gram.conftest import _grid_on

    base = tmp_path_factory.mktemp("lost")
    server = RedisServer(base / "redis")
    server.start()
    try:
        for live in _grid_on(server, base, None, (4, 5, 6), {}, gatekeepers=False):
            live.gatekeepers = start_gatekeepers(live)
            live.redis_server = server
            yield live
            gc.collect()
    finally:
        server.stop()


def _rows(grid: Any, job_id: int) -> tuple[Any, ...]:
    with db.session_scope(grid.sessions) as session:
        row = session.get(CoallocatedJob, job_id)
        subs = {s.label: (JobState(s.state), s.gram_job_id) for s in row.subjobs}
        return JobState(row.state), SqlBarrier(row.barrier_state), row.failure_reason, subs


def _gram(grid: Any, gram_id: int) -> tuple[JobState, Any]:
    with db.session_scope(grid.sessions) as session:
        row = session.get(Job, gram_id)
        return JobState(row.state), row.start_time



def _restart_empty(server: RedisServer) -> None:
    """SIGKILL the redis-server (no save: it had none) and start it again, empty."""
    proc = server.process
    assert proc is not None
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    server.process = None
    server.start()


def test_redis_lost_before_the_release_fails_the_job_and_starts_nothing(lost_grid, tmp_path):
    out = tmp_path / "m"
    out.mkdir()
    grid, prog = lost_grid.grid, program(tmp_path)
    # rmB's one running node (node3, 2 processors) is full: b waits in rmB's queue
    blocker = grid.submit('&(count=2)(executable="/bin/sleep")(arguments="120")', "rmB")
    until(lambda: grid.status(blocker.id).state is JobState.ACTIVE, 60, "blocker running")
    timeout = 40.0
    rsl = "+" + component("rmA", "a", 1, prog, out) + component("rmB", "b", 1, prog, out)
    t0 = time.monotonic()
    job = grid.job_request(rsl, barrier_timeout=timeout)
    until(lambda: (job.status().subjob("a").entered or 0) >= 1, 60, "a in the barrier")
    gram_b = until(lambda: _rows(grid, job.id)[3]["b"][1], 30, "b submitted")
    assert _gram(grid, gram_b) == (JobState.PENDING, None)  # queued behind the blocker

    _restart_empty(lost_grid.redis_server)
    lost_at = time.monotonic()
    state, barrier, reason, subs = until(
        lambda: (lambda r: r if r[0].terminal else None)(_rows(grid, job.id)),
        timeout + 10, "the job failed by itself")
    settled = time.monotonic()
    print(f"settled {settled - lost_at:.1f} s after Redis came back empty, "
          f"{settled - t0:.1f} s after the request (barrier timeout {timeout:g} s)")
    assert settled - t0 <= timeout + 5
    assert (state, barrier, reason) == (JobState.FAILED, SqlBarrier.FAILED, LOST_REASON)
    assert "coordination state lost" in reason and "barrier timeout" not in reason
    assert _gram(grid, gram_b) == (JobState.FAILED, None)  # cancelled, never started
    # the blocker goes: rmB is free again, and b must still never start
    grid.cancel(blocker.id)
    until(lambda: grid.status(blocker.id).state.terminal, 60, "blocker ended")
    until(lambda: all(s.terminal for s, _ in _rows(grid, job.id)[3].values()), 30,
           "every subjob row ended")
    time.sleep(3)  # (a few iterations of rmB)
    assert _gram(grid, gram_b) == (JobState.FAILED, None)
    assert markers(out) == []  # nobody passed the barrier
