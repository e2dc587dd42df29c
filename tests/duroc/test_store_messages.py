"""Tagged message queues, key expiry and purge in the coordination store."""

from __future__ import annotations

import threading
import time

import pytest

from grid_tasks.duroc.store import CoordinationStore
from grid_tasks.duroc.store_errors import (
    BarrierAbortedError, JobNotFoundError, ReceiveTimeoutError, RuntimeMisuseError,
)
from grid_tasks.duroc.store_models import SubjobSpec


def job_keys(store: CoordinationStore, job: str) -> list[bytes]:
    return sorted(store.client.scan_iter(match=f"{store.keys(job).base}:*"))


def test_messages_are_matched_by_tag_in_any_arrival_order(store: CoordinationStore) -> None:
    store.create_job("j", [SubjobSpec("a", 2)])
    keys = store.keys("j")
    for tag, body in [("3", b"three"), ("1", b"one"), ("2", b"two"), ("1", b"one again")]:
        store.send("j", keys.intra_queue(0, 1, tag), 0, body)
    got = [store.receive("j", keys.intra_queue(0, 1, tag), tag, timeout=1)
           for tag in ("2", "1", "3", "1")]
    assert [(m.tag, m.data, m.sender) for m in got] == [
        ("2", b"two", 0), ("1", b"one", 0), ("3", b"three", 0), ("1", b"one again", 0)]


def test_payloads_are_arbitrary_bytes(store: CoordinationStore) -> None:
    store.create_job("j", [SubjobSpec("a", 1)])
    queue = store.keys("j").inter_queue(0, "bin")
    payload = bytes(range(256)) + b":\x00:"
    store.send("j", queue, 5, payload)
    message = store.receive("j", queue, "bin", timeout=1)
    assert (message.sender, message.data) == (5, payload)
    with pytest.raises(RuntimeMisuseError, match="bytes"):
        store.send("j", queue, 0, "text")  # type: ignore[arg-type]


def test_receive_times_out_and_leaves_other_tags(store: CoordinationStore) -> None:
    store.create_job("j", [SubjobSpec("a", 1)])
    keys = store.keys("j")
    store.send("j", keys.intra_queue(0, 0, "A"), 0, b"for A")
    started = time.monotonic()
    with pytest.raises(ReceiveTimeoutError, match="tag 'B'"):
        store.receive("j", keys.intra_queue(0, 0, "B"), "B", timeout=0.3)
    assert time.monotonic() - started < 2
    assert store.receive("j", keys.intra_queue(0, 0, "A"), "A", timeout=1).data == b"for A"


def test_blocked_receive_gets_a_later_message(store: CoordinationStore) -> None:
    store.create_job("j", [SubjobSpec("a", 1)])
    queue = store.keys("j").intra_queue(0, 0, "late")
    timer = threading.Timer(0.2, lambda: store.send("j", queue, 0, b"here"))
    timer.start()
    assert store.receive("j", queue, "late", timeout=5).data == b"here"
    timer.join()


def test_abort_stops_sends_and_blocked_receives(store: CoordinationStore) -> None:
    store.create_job("j", [SubjobSpec("a", 1)])
    queue = store.keys("j").intra_queue(0, 0, "t")
    threading.Timer(0.1, lambda: store.abort("j", "cancelled")).start()
    with pytest.raises(BarrierAbortedError, match="cancelled"):
        store.receive("j", queue, "t", timeout=5)
    with pytest.raises(BarrierAbortedError):
        store.send("j", queue, 0, b"x")


def test_every_key_expires_with_the_job_and_purge_leaves_nothing(
        store: CoordinationStore) -> None:
    store.create_job("j", [SubjobSpec("a", 2), SubjobSpec("b", 1)], ttl_s=600)
    store.create_job("other", [SubjobSpec("a", 1)])
    keys = store.keys("j")
    store.enter("j", 0, 0)
    store.enter("j", 1, 0)
    store.send("j", keys.intra_queue(0, 1, "t"), 0, b"unread")
    store.send("j", keys.inter_queue(1, "t"), 0, b"unread too")
    store.release("j", require_complete=False)
    joiner = threading.Thread(target=store.join_group, args=("j", 0, 5))
    joiner.start()
    store.join_group("j", 1, timeout=5)
    joiner.join()
    present = job_keys(store, "j")
    assert len(present) >= 8
    for key in present:
        ttl_ms = store.client.pttl(key)
        assert 590_000 < ttl_ms <= 600_000, (key, ttl_ms)
    store.grant_access("j")
    assert store.purge("j") == len(present)
    assert job_keys(store, "j") == []
    assert "grid_tasks-job-j" not in store.client.acl_users()
    assert job_keys(store, "other") != []  # another job is untouched
    with pytest.raises(JobNotFoundError):
        store.send("j", keys.intra_queue(0, 1, "t"), 0, b"after purge")
    assert job_keys(store, "j") == []  # a late send recreates nothing


def test_keys_really_expire(store: CoordinationStore) -> None:
    store.create_job("j", [SubjobSpec("a", 1)], ttl_s=0.3)
    store.send("j", store.keys("j").intra_queue(0, 0, "t"), 0, b"x")
    store.enter("j", 0, 0)
    time.sleep(0.5)
    assert job_keys(store, "j") == []


def test_bad_tags(store: CoordinationStore) -> None:
    store.create_job("j", [SubjobSpec("a", 1)])
    for tag in ("", "x" * 257, None):
        with pytest.raises(RuntimeMisuseError, match="tag"):
            store.keys("j").intra_queue(0, 0, tag)  # type: ignore[arg-type]
