"""Issue 21 finding 8 on the live DUROC grid (real gatekeeper, scheduler and node daemon
processes, a private redis-server): a waiting subjob costs no broker message; the
release and the end are recorded (and announced) once each; the subjob rows are current
when the job ends; a barrier times out with nobody looking."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from grid_tasks import db
from grid_tasks.db.models import CoallocatedJob
from grid_tasks.db.models.jobs import BarrierState as SqlBarrier
from grid_tasks.duroc.control import Coallocator
from grid_tasks.duroc.waiting import COALLOC_CHANNEL
from grid_tasks.effects import ITERATE
from grid_tasks.scheduling.tasks import PING
from grid_tasks.states import JobState
from tests.duroc.live import BrokerPublishes, component, markers, program
from tests.waiting import until

pytestmark = pytest.mark.timeout(240)



def _sql(grid: Any, job_id: int) -> tuple[Any, ...]:
    """The job's row and its subjob rows, read in SQL (not through the door)."""
    with db.session_scope(grid.sessions) as session:
        row = session.get(CoallocatedJob, job_id)
        return (JobState(row.state), SqlBarrier(row.barrier_state), row.failure_reason,
                [(s.label, JobState(s.state), s.checked_in, s.gram_job_id)
                 for s in row.subjobs])


def _started(grid: Any, job_id: int) -> bool:
    subs = _sql(grid, job_id)[3]
    return all(g is not None and grid.status(g).state is JobState.ACTIVE
               for _, _, _, g in subs)


@pytest.mark.slow  # over 15 s: the 20-minute CI budget (run with -m slow)
def test_a_waiting_subjob_costs_no_broker_message(duroc_grid, tmp_path):
    out = tmp_path / "m"
    out.mkdir()
    grid, prog, settings = duroc_grid.grid, program(tmp_path), duroc_grid.settings
    client = redis.Redis.from_url(settings.redis_url)
    announced = client.pubsub(ignore_subscribe_messages=True)
    announced.psubscribe(COALLOC_CHANNEL.format("*"))
    try:
        rsl = "+" + component("rmA", "a", 1, prog, out) + \
            component("rmB", "b", 1, prog, out, "pre12")  # b reaches the barrier late
        job = grid.job_request(rsl, barrier_timeout=120)
        until(lambda: _started(grid, job.id), 60, "both subjobs running")
        window = 3.0
        with BrokerPublishes(settings.broker_url) as publishes:
            time.sleep(window)
        assert job.status().subjob("b").entered == 0  # the window was all waiting
        waiting = 2  # a in the barrier, b before it
        duroc = [t for t in publishes.tasks if t.startswith("grid_tasks.duroc.")]
        rate = len(duroc) / (waiting * window)
        print(f"DUROC broker messages per waiting subjob per second: {rate:.2f}; "
              f"others: {publishes.tasks}")
        assert duroc == [], duroc  # was 2 per subjob per second (headers re-queued)
        # the rest is GRAM's own traffic, not the coallocation's (the RMs' lease watch)
        assert set(publishes.tasks) <= {ITERATE}, list(zip(publishes.queues, publishes.tasks))
        with BrokerPublishes(settings.broker_url) as probe:  # the count can see one
            grid.services.app.send_task(PING, queue="gram.rmA", ignore_result=True)
        assert ("gram.rmA", PING) in zip(probe.queues, probe.tasks)
        deliveries = Coallocator(grid.services).header_deliveries(job.id)
        assert {a: d["runs"] for a, d in deliveries.items()} == {0: 1, 1: 1}  # run once

        final = job.wait(timeout=60)
        assert final.state is JobState.DONE, final
        assert markers(out) == ["a-0", "b-0"]
        state, barrier, _, subs = _sql(grid, job.id)  # the rows, current at the end
        assert (state, barrier) == (JobState.DONE, SqlBarrier.RELEASED)
        assert [(label, s, n) for label, s, n, _ in subs] == [
            ("a", JobState.DONE, 1), ("b", JobState.DONE, 1)]
        seen, quiet = [], time.monotonic() + 1.5  # any late announcement comes by then
        while time.monotonic() < quiet:
            message = announced.get_message(timeout=0.1)
            if message is not None and message["channel"] == \
                    COALLOC_CHANNEL.format(job.id).encode():
                seen.append(message["data"].decode())
        assert seen == ["ACTIVE", "DONE"]  # the release recorded once, the end once
    finally:
        announced.close()
        client.close()


def test_a_barrier_times_out_with_nobody_looking(duroc_grid, tmp_path):
    """Finding 4's first half: no reader, yet the job fails at its barrier timeout (the
    deadline task and the scheduler's barrier watch), its subjobs cancelled."""
    out = tmp_path / "m"
    out.mkdir()
    grid, prog = duroc_grid.grid, program(tmp_path)
    rsl = "+" + component("rmA", "a", 1, prog, out) + \
        component("rmB", "b", 1, prog, out, "pre90")
    timeout = 8.0
    t0 = time.monotonic()
    job = grid.job_request(rsl, barrier_timeout=timeout)
    state = until(lambda: (lambda r: r if r[0].terminal else None)(_sql(grid, job.id)),
                   timeout + 10, "the job failed")
    elapsed = time.monotonic() - t0
    assert elapsed <= timeout + 5, elapsed
    assert state[:2] == (JobState.FAILED, SqlBarrier.TIMED_OUT), state
    assert state[2] == "barrier timeout: subjob 'b' not in the barrier after 8 s", state
    until(lambda: all(s.terminal for _, s, _, _ in _sql(grid, job.id)[3]), 30,
           "every subjob ended (cancelled), in its row")
    assert markers(out) == []
