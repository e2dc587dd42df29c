"""The iteration lock: renewed while its holder lives, lapsed soon after it dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest
import redis

from grid_tasks.effects import lock_key
from grid_tasks.queues import iteration_queue
from grid_tasks.scheduling import lock as lockmod
from grid_tasks.scheduling.lock import LockKeeper, watch_key
from grid_tasks.services import services_for
from tests.waiting import until


@pytest.fixture
def client(settings):
    c = redis.Redis.from_url(settings.redis_url)
    yield c
    c.close()



def test_the_keeper_renews_a_held_lock_past_its_ttl_and_stops_on_drop(client):
    key, token = f"test-lock-{uuid.uuid4().hex}", "mine"
    client.set(key, token, px=600)
    keeper = LockKeeper(client, ttl_ms=600)
    keeper.hold(key, token)
    time.sleep(1.5)  # more than two TTLs
    assert client.get(key) == token.encode()
    keeper.drop(key)
    until(lambda: not client.exists(key), 1.5, "the dropped lock to lapse")


def test_the_keeper_renews_only_its_own_token(client):
    key = f"test-lock-{uuid.uuid4().hex}"
    client.set(key, "someone else", px=400)
    keeper = LockKeeper(client, ttl_ms=400)
    keeper.hold(key, "mine")  # e.g. our lock lapsed and another process took it
    assert keeper.renew_now() == []
    until(lambda: not client.exists(key), 1.0, "the foreign lock to lapse")


def test_a_hung_holder_keeps_the_lock_at_most_max_hold(client):
    key = f"test-lock-{uuid.uuid4().hex}"
    client.set(key, "mine", px=300)
    keeper = LockKeeper(client, ttl_ms=300, max_hold_s=0.5)
    keeper.hold(key, "mine")
    until(lambda: not client.exists(key), 2.0, "the hung holder's lock to lapse")


HOLDER = textwrap.dedent("""
    import sys, time
    from grid_tasks.settings import Settings
    from grid_tasks.services import Services
    import grid_tasks.scheduling.runner as runner

    def hang(*_a, **_k):
        print("holding", flush=True)
        time.sleep(3600)

    runner._one = hang
    runner.iterate_here(Services(Settings.from_env()), sys.argv[1])
""")


def test_a_killed_holder_stalls_its_rm_less_than_ten_seconds(settings, grid_env, client,
                                                              celery_app_factory,
                                                              in_process_worker,
                                                              monkeypatch):
    """A scheduler SIGKILLed inside its iteration: its lock lapses within the TTL, and
    the iteration a waiting caller asked for runs then - not at beat's next period."""
    import grid_tasks.scheduling.runner as runner

    rm = f"rmL-{uuid.uuid4().hex[:8]}"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, rm], stdout=subprocess.PIPE,
                              env={**os.environ, **grid_env})
    try:
        assert holder.stdout.readline().strip() == b"holding"
        time.sleep(lockmod.LOCK_TTL_MS / 1000 + 0.5)  # renewed past one TTL while alive
        assert client.exists(lock_key(rm))
        ran = threading.Event()
        monkeypatch.setattr(runner, "_one", lambda *_a, **_k: (ran.set(), (False, False))[1])
        app = celery_app_factory()
        in_process_worker(app, queues=["scheduler", iteration_queue(rm)])  # not in the topology
        assert runner.iterate_here(services_for(app), rm) == 0  # held: a trigger waits
        assert client.exists(watch_key(lock_key(rm)))  # and a look at the lock's expiry
        holder.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        holder.wait(5)
        assert ran.wait(15), "the pending iteration never ran after its holder died"
        stall = time.monotonic() - killed
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(5)
    assert stall < 10.0, f"RM stalled {stall:.1f} s after its lock holder died"
    assert stall < lockmod.LOCK_TTL_MS / 1000 + 2.0
