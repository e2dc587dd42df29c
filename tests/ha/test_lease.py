"""The leadership lease and the HA scheduler's sending rules, on the private Redis."""

from __future__ import annotations

import time

import pytest
import redis

from grid_tasks.errors import ConfigError, GridTasksError
from grid_tasks.ha.config import LEASE_KEY, BeatOptions, beat_config
from grid_tasks.ha.lease import Lease, read_holder


@pytest.fixture
def client(settings):
    c = redis.Redis.from_url(settings.redis_url)
    yield c
    c.close()


def test_one_holder_renewal_and_expiry(client):
    a, b = Lease(client, LEASE_KEY, "a", 0.3), Lease(client, LEASE_KEY, "b", 0.3)
    assert a.claim() and not b.claim()
    assert read_holder(client, LEASE_KEY).identity == "a"
    time.sleep(0.2)
    assert a.claim()  # renewal pushes expiry out again
    time.sleep(0.2)
    assert not b.claim(), "a renewed lease must not expire at the first deadline"
    time.sleep(0.35)  # a silent: its lease runs out
    assert b.claim() and read_holder(client, LEASE_KEY).identity == "b"
    assert not a.claim() and not a.held


def test_release_frees_only_our_own_lease(client):
    a, b = Lease(client, LEASE_KEY, "a", 5), Lease(client, LEASE_KEY, "b", 5)
    assert a.claim()
    assert not b.release(), "a late release must not free someone else's lease"
    assert read_holder(client, LEASE_KEY).identity == "a"
    assert a.release() and read_holder(client, LEASE_KEY) is None
    assert b.claim()


def test_fresh_means_claimed_within_half_the_ttl(client):
    lease = Lease(client, LEASE_KEY, "a", 0.2)
    assert not lease.fresh()
    assert lease.claim() and lease.fresh()
    time.sleep(0.12)
    assert not lease.fresh()


@pytest.mark.parametrize("env, fragment", [
    ({"GRID_TASKS_BEAT_LEASE": "soon"}, "GRID_TASKS_BEAT_LEASE='soon'"),
    ({"GRID_TASKS_BEAT_LEASE": "-1"}, "positive"),
    ({"GRID_TASKS_BEAT_LEASE": "2", "GRID_TASKS_BEAT_POLL": "3"}, "shorter than the lease"),
])
def test_bad_options_are_typed_errors(env, fragment):
    with pytest.raises(ConfigError) as err:
        BeatOptions.from_env(env)
    assert fragment in str(err.value)
    assert isinstance(err.value, GridTasksError)


def test_option_timing():
    opts = BeatOptions.from_env({"GRID_TASKS_BEAT_LEASE": "6"})
    assert opts.poll_interval == 0.6 and opts.renew_interval == 2.0
    assert opts.failover_bound == pytest.approx(6.6)
    assert BeatOptions(lease=30).poll_interval == 1.0
    assert BeatOptions.from_env({}, lease=3.0, poll=0.5).failover_bound == 3.5


def _scheduler(settings, celery_app_factory, name, lease=5.0):
    from grid_tasks.ha.scheduler import HABeatScheduler

    app = celery_app_factory()
    app.conf.update(beat_config(settings, BeatOptions(lease=lease, poll=0.1, identity=name)))
    app.conf.beat_schedule = {"probe": {"task": "tests.ha.unrun", "schedule": 0.05,
                                        "options": {"queue": "ha-unit"}}}
    return HABeatScheduler(app, lazy=False)


def test_only_the_lease_holder_sends(settings, celery_app_factory):
    broker = redis.Redis.from_url(settings.broker_url)
    one = _scheduler(settings, celery_app_factory, "one")
    two = _scheduler(settings, celery_app_factory, "two")
    try:
        for _ in range(6):
            one.tick(), two.tick()
            time.sleep(0.06)
        sent_by_one = broker.llen("ha-unit")
        assert sent_by_one >= 3 and one.role == "leader" and two.role == "standby"
        # Someone else takes the lease (as after a pause): the old leader demotes, sends nothing.
        redis.Redis.from_url(settings.redis_url).set(LEASE_KEY, "intruder", px=5000)
        for _ in range(4):
            one.tick()
            time.sleep(0.06)
        assert one.role == "standby" and broker.llen("ha-unit") == sent_by_one
        # A direct send with a stale lease is refused too.
        entry = next(iter(one.schedule.values()))
        assert one.apply_async(entry) is None and broker.llen("ha-unit") == sent_by_one
    finally:
        one.close(), two.close()
        broker.close()


def test_new_leader_keeps_its_entries_and_drops_strangers(settings, celery_app_factory):
    from grid_tasks.ha.status import read_entries

    client = redis.Redis.from_url(settings.redis_url)
    one = _scheduler(settings, celery_app_factory, "one")
    one.update_from_dict({"stranger": {"task": "x.y", "schedule": 60.0}})
    one._own.pop("stranger")  # installed by some other beat, not by this one
    assert {e.name for e in read_entries(client)} == {"probe", "stranger"}
    one.tick()
    assert one.role == "leader"
    assert [e.name for e in read_entries(client)] == ["probe"]
    one.close()
    assert read_holder(client, LEASE_KEY) is None, "a clean close releases the lease"
    client.close()
