"""The runner applies the spacing: a costly RM's next full iteration on the shared
workers waits while other RMs wait, and is sent for later, never dropped."""

from __future__ import annotations

import json

import pytest
import redis

from grid_tasks.effects import dirty_key, queued_key, trigger_iteration
from grid_tasks.queues import iteration_queue
from grid_tasks.scheduling import runner
from grid_tasks.scheduling.spacing import LastIteration
from grid_tasks.services import Clock, Services


class StoppedClock(Clock):
    """A clock the test moves (the spacing reads ``now`` from the services' clock)."""

    def __init__(self, at: float) -> None:
        self.at = at

    def time(self) -> float:
        return self.at


@pytest.fixture
def grid(settings, celery_app_factory, monkeypatch):
    runs: list[tuple[str, bool]] = []
    monkeypatch.setattr(runner, "_one", lambda _s, rm, quick=False: (
        runs.append((rm, quick)), (False, False))[1])  # the iteration body: counted
    clock = StoppedClock(100.2)
    services = Services(settings, app=celery_app_factory(), clock=clock)
    broker = redis.Redis.from_url(settings.broker_url)
    yield services, clock, runs, broker
    broker.close()


def _sent(broker, rm: str) -> list[dict]:
    return [json.loads(m)["headers"] for m in broker.lrange(iteration_queue(rm), 0, -1)]


def test_a_costly_rm_waits_while_others_wait_and_its_iteration_comes_later(grid):
    services, clock, runs, broker = grid
    client = services.redis
    client.set(runner.cost_key("rmA"), LastIteration(1.0, ended=100.0).encode())
    assert runner.iterate_here(services, "rmA") == 1  # nobody waits: at once
    client.set(queued_key("rmB"), 1)  # rmB's iteration waits for a shared worker
    assert runner.iterate_here(services, "rmA") == 0  # rests 0.8 s
    assert client.get(dirty_key("rmA")) == b"1"  # its trigger kept
    sent = _sent(broker, "rmA")
    assert len(sent) == 1 and sent[0]["eta"]  # the held-off iteration, for later
    assert trigger_iteration(services.app, "rmA", client=client) is False  # folded into it
    assert len(_sent(broker, "rmA")) == 1
    clock.at = 101.0  # the held-off iteration arrives as its rest ends: it runs
    assert runner.iterate_here(services, "rmA") == 1
    assert runs == [("rmA", False), ("rmA", False)]


def test_a_cheap_rm_and_the_gatekeepers_quick_pass_are_never_delayed(grid):
    services, _, runs, broker = grid
    client = services.redis
    client.set(queued_key("rmB"), 1)
    client.set(runner.cost_key("rmA"), LastIteration(0.05, ended=100.0).encode())
    assert runner.iterate_here(services, "rmA") == 1  # cheap
    client.set(runner.cost_key("rmA"), LastIteration(1.0, ended=100.0).encode())
    assert runner.iterate_here(services, "rmA", quick=True) == 1  # a job's quick start
    assert runs == [("rmA", False), ("rmA", True)] and _sent(broker, "rmA") == []
