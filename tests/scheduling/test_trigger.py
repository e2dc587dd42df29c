"""The iteration lock: one run per RM at a time; triggers during a run fold into one more."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
import redis

from grid_tasks.effects import dirty_key, lock_key, queued_key, trigger_iteration
from grid_tasks.queues import iteration_queue
from grid_tasks.scheduling.tasks import iterate
from grid_tasks.services import services_for

# RM names of this module alone: an iteration of a real RM left running by an earlier
# test's worker (same Redis) must not hold these tests' locks.
RM_A, RM_B = f"rmA-{uuid.uuid4().hex[:8]}", f"rmB-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def app_and_runs(celery_app_factory, settings, monkeypatch):
    import grid_tasks.scheduling.runner as runner

    app = celery_app_factory()
    state = {"active": 0, "max_active": 0, "runs": 0}
    lock = threading.Lock()

    def one(_services, rm, quick=False):  # the iteration body: overlap, some time
        state.setdefault("quick", []).append(quick)
        with lock:
            state["active"] += 1
            state["runs"] += 1
            state["max_active"] = max(state["max_active"], state["active"])
        time.sleep(0.05)
        with lock:
            state["active"] -= 1
        return False, state.pop("conflicts", 0) > 0

    monkeypatch.setattr(runner, "_one", one)
    return app, state, redis.Redis.from_url(settings.redis_url)


def test_concurrent_calls_never_overlap_and_fold(app_and_runs):
    import grid_tasks.scheduling.runner as runner

    app, state, client = app_and_runs
    inner, entered = runner._one, threading.Semaphore(0)

    def first_run_outlasts_the_callers(s, rm, **kw):
        if state["runs"] == 0:  # a loaded machine may start threads far apart: wait them
            for _ in range(12):
                entered.acquire(timeout=10)
            time.sleep(0.3)  # their lock attempts follow their entry at once
        return inner(s, rm, **kw)

    task = app.tasks[iterate.name]  # bound to this app: new threads see Celery's default

    def call() -> None:
        entered.release()
        task.run(rm=RM_A)

    runner._one = first_run_outlasts_the_callers
    threads = [threading.Thread(target=call) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert state["max_active"] == 1
    assert 1 <= state["runs"] < 12  # folded
    assert client.get(lock_key(RM_A)) is None  # released


def test_trigger_during_a_run_gives_exactly_one_more(app_and_runs):
    import grid_tasks.scheduling.runner as runner

    app, state, client = app_and_runs
    inner = runner._one

    def one_with_triggers(s, rm, **kw):
        c = s.redis
        if state["runs"] == 0:
            for _ in range(5):  # five events arrive while the first run works
                c.set(dirty_key(rm), 1)
        return inner(s, rm, **kw)

    runner._one = one_with_triggers
    assert iterate.run(rm=RM_B) == 2
    assert state["runs"] == 2


def test_a_lost_race_runs_again_at_once_but_bounded(app_and_runs):
    import grid_tasks.scheduling.runner as runner

    _, state, _ = app_and_runs
    inner = runner._one

    def always_conflicting(s, rm, **kw):
        state["conflicts"] = 1
        return inner(s, rm, **kw)

    runner._one = always_conflicting
    assert iterate.run(rm=RM_A) == runner.CONFLICT_RERUNS + 1
    assert state["runs"] == runner.CONFLICT_RERUNS + 1


def test_trigger_enqueues_once_until_picked_up(app_and_runs, settings):
    app, _, client = app_and_runs
    assert trigger_iteration(app, RM_A, client=client) is True
    assert trigger_iteration(app, RM_A, client=client) is False  # already queued
    assert client.get(dirty_key(RM_A)) == b"1" and client.exists(queued_key(RM_A))
    broker = redis.Redis.from_url(settings.broker_url)
    assert broker.llen(iteration_queue(RM_A)) == 1  # on the RM's own queue
    assert broker.llen("scheduler") == 0


def test_trigger_while_an_iteration_runs_sends_no_task(app_and_runs, settings):
    import grid_tasks.scheduling.runner as runner

    app, state, client = app_and_runs
    broker = redis.Redis.from_url(settings.broker_url)
    inner, sent = runner._one, []

    def one_with_events(s, rm, **kw):
        c = s.redis
        if state["runs"] == 0:  # submissions and job ends arrive while the run works
            sent.extend(trigger_iteration(app, rm, client=c) for _ in range(5))
            assert broker.llen(iteration_queue(rm)) == 0 and c.get(dirty_key(rm)) == b"1"
        return inner(s, rm, **kw)

    runner._one = one_with_events
    assert iterate.run(rm=RM_A) == 2  # the holder ran once more for them
    assert sent == [False] * 5
    assert broker.llen(iteration_queue(RM_A)) == 0 and client.get(lock_key(RM_A)) is None


def test_a_stream_of_triggers_is_handed_to_a_fresh_task(app_and_runs, settings):
    """One task never iterates forever: past its bound the pending trigger is re-queued."""
    import grid_tasks.scheduling.runner as runner

    _, state, client = app_and_runs
    inner = runner._one

    def always_triggered(s, rm, **kw):
        c = s.redis
        c.set(dirty_key(rm), 1)  # an event arrives during every run
        return inner(s, rm, **kw)

    runner._one = always_triggered
    assert iterate.run(rm="rmS") == runner.MAX_RUNS_PER_TASK
    assert client.get(lock_key("rmS")) is None  # released
    broker = redis.Redis.from_url(settings.broker_url)
    assert broker.llen(iteration_queue("rmS")) == 1  # the rest goes to a fresh task


def test_an_outbox_triggers_and_announces_in_one_round_trip(app_and_runs, settings):
    """Outbox.flush: the triggers (first) and the events go in one pipeline; a task is
    sent for each RM not queued yet, none for one already queued."""
    from grid_tasks.events import JobEvent, subscribe
    from grid_tasks.gram.records import Outbox

    app, _, client = app_and_runs
    broker = redis.Redis.from_url(settings.broker_url)
    assert trigger_iteration(app, RM_B, client=client) is True  # RM_B: queued already
    watcher = subscribe(client, 41)
    commands = []
    real = client.pipeline

    def counting_pipeline(*args, **kwargs):
        pipe = real(*args, **kwargs)
        original = pipe.execute
        pipe.execute = lambda *a, **k: (commands.append(
            [c[0][0] for c in pipe.command_stack]), original(*a, **k))[1]
        return pipe

    client.pipeline = counting_pipeline
    outbox = Outbox(events=[JobEvent(41, "DONE", "exit code 0", 1.0)], rms={RM_A, RM_B})
    outbox.flush(client, app)
    assert commands == [["EVAL", "EVAL", "PUBLISH"]]  # one round trip, triggers first
    # RM_B's earlier task and RM_A's new one
    assert [broker.llen(iteration_queue(rm)) for rm in (RM_A, RM_B)] == [1, 1]
    assert client.get(dirty_key(RM_A)) == b"1" and client.get(dirty_key(RM_B)) == b"1"
    deadline, message = time.monotonic() + 5, None
    while message is None and time.monotonic() < deadline:
        message = watcher.get_message(timeout=0.5)
    assert JobEvent.from_json(message["data"]).state == "DONE"
    assert (outbox.events, outbox.rms) == ([], set())


def test_a_quick_call_makes_only_its_own_first_run_quick(app_and_runs):
    import grid_tasks.scheduling.runner as runner

    _, state, _ = app_and_runs
    inner = runner._one

    def one_with_a_trigger(s, rm, **kw):
        c = s.redis
        if state["runs"] == 0:  # another submission's trigger: a full run for it
            c.set(dirty_key(rm), 1)
        return inner(s, rm, **kw)

    runner._one = one_with_a_trigger
    assert runner.iterate_here(services_for(iterate.app), RM_A, quick=True) == 2
    assert state["quick"] == [True, False]
    assert iterate.run(rm=RM_B) == 1 and state["quick"][-1] is False
