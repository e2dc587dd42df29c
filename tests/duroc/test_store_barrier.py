"""The start barrier in the store: entries, awaiting, release once, abort, timeouts."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from grid_tasks.duroc.store import CoordinationStore
from grid_tasks.duroc.store_errors import (
    BarrierAbortedError, BarrierNotReadyError, BarrierTimeoutError, JobNotFoundError,
    RuntimeMisuseError, SubjobNotFoundError,
)
from grid_tasks.duroc.store_models import BarrierState, SubjobSpec
from grid_tasks.states import SubjobStartType


class Background:
    """Run a call in a thread; keep its result or exception."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self.thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self.result = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.error = exc

    def join(self, timeout: float = 10) -> "Background":
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "background call still blocked"
        return self

    @property
    def running(self) -> bool:
        return self.thread.is_alive()


def test_entry_is_idempotent_per_rank(store: CoordinationStore) -> None:
    store.create_job("j", [SubjobSpec("a", 3)])
    for _ in range(3):
        store.enter("j", 0, 1)
    assert store.snapshot("j").subjobs[0].entered == 1
    with pytest.raises(RuntimeMisuseError, match="rank 3 outside the subjob"):
        store.enter("j", 0, 3)
    with pytest.raises(SubjobNotFoundError):
        store.enter("j", 7, 0)
    with pytest.raises(RuntimeMisuseError, match="process count 2 differs .* size 3"):
        store.enter("j", 0, 0, size=2)
    assert store.snapshot("j").subjobs[0].entered == 1  # the refused entry left no trace


def test_await_entries_blocks_until_every_process_entered(store: CoordinationStore) -> None:
    store.create_job("j", [SubjobSpec("a", 2), SubjobSpec("b", 1)])
    waiter = Background(lambda: store.await_entries("j", timeout=10))
    store.enter("j", 0, 0)
    store.enter("j", 1, 0)
    time.sleep(0.2)
    assert waiter.running  # rank 1 of subjob a is still missing
    store.enter("j", 0, 1)
    snap = waiter.join().result
    assert [s.entered for s in snap.subjobs] == [2, 1]
    assert snap.pending() == []


def test_await_a_single_subjob(store: CoordinationStore) -> None:
    store.create_job("j", [SubjobSpec("a", 1), SubjobSpec("b", 1)])
    store.enter("j", 1, 0)
    assert store.await_entries("j", [1], timeout=2).subjobs[1].complete
    with pytest.raises(BarrierTimeoutError):
        store.await_entries("j", [0], timeout=0.3)


def test_await_follows_added_and_deleted_subjobs(store: CoordinationStore) -> None:
    store.create_job("j", [SubjobSpec("a", 1)])
    waiter = Background(lambda: store.await_entries("j", timeout=10))
    late = store.add_subjob("j", SubjobSpec("late", 1))
    store.enter("j", 0, 0)
    time.sleep(0.2)
    assert waiter.running  # the added subjob joined the same barrier
    store.delete_subjob("j", "late")
    assert [s.label for s in waiter.join().result.subjobs] == ["a"]
    with pytest.raises(SubjobNotFoundError):
        store.await_entries("j", [late.address], timeout=1)


def test_no_barrier_subjobs_are_not_awaited_and_do_not_wait(store: CoordinationStore) -> None:
    store.create_job("j", [SubjobSpec("a", 1),
                           SubjobSpec("free", 2, SubjobStartType.NO_BARRIER)])
    assert store.wait_release("j", 1, 0, timeout=1) is None  # runs forward at once
    store.enter("j", 0, 0)
    snap = store.await_entries("j", timeout=2)
    assert snap.subjobs[1].entered == 0


def test_release_reaches_every_waiter_with_the_frozen_structure(
        store: CoordinationStore) -> None:
    store.create_job("j", [SubjobSpec("a", 2), SubjobSpec("b", 1)])
    waiters = [Background(lambda a=a, r=r: store.wait_release("j", a, r, timeout=10))
               for a, r in [(0, 0), (0, 1), (1, 0)]]
    store.await_entries("j", timeout=10)
    assert all(w.running for w in waiters)
    released = store.release("j")
    for waiter in waiters:
        assert waiter.join().result == released
    assert store.release("j") == released  # once: a second release changes nothing
    assert store.wait_release("j", 1, 0, timeout=1) == released  # late entry passes
    assert store.snapshot("j").state is BarrierState.RELEASED


def test_release_requiring_complete_barrier(store: CoordinationStore) -> None:
    store.create_job("j", [SubjobSpec("a", 2)])
    store.enter("j", 0, 0)
    with pytest.raises(BarrierNotReadyError, match="'a'"):
        store.release("j")
    assert store.snapshot("j").state is BarrierState.OPEN
    assert store.release("j", require_complete=False).subjobs[0].label == "a"


def test_abort_fails_waiters_and_later_entries(store: CoordinationStore) -> None:
    store.create_job("j", [SubjobSpec("a", 2)])
    waiter = Background(lambda: store.wait_release("j", 0, 0, timeout=10))
    control = Background(lambda: store.await_entries("j", timeout=10))
    time.sleep(0.1)
    assert store.abort("j", "subjob b failed: EXECUTABLE_NOT_FOUND")
    assert not store.abort("j", "again")  # already aborted; reason kept
    for background in (waiter, control):
        error = background.join().error
        assert isinstance(error, BarrierAbortedError)
        assert error.reason == "subjob b failed: EXECUTABLE_NOT_FOUND"
    with pytest.raises(BarrierAbortedError, match="EXECUTABLE_NOT_FOUND"):
        store.wait_release("j", 0, 1, timeout=1)
    with pytest.raises(BarrierAbortedError):
        store.release("j")


def test_barrier_timeout(store: CoordinationStore) -> None:
    store.create_job("j", [SubjobSpec("a", 2)])
    started = time.monotonic()
    with pytest.raises(BarrierTimeoutError, match="not released after 0.3 s"):
        store.wait_release("j", 0, 0, timeout=0.3)
    assert 0.25 < time.monotonic() - started < 2


def test_waiter_notices_a_purged_job(store: CoordinationStore) -> None:
    store.create_job("j", [SubjobSpec("a", 2)])
    waiter = Background(lambda: store.wait_release("j", 0, 0))  # no timeout
    time.sleep(0.1)
    store.purge("j")
    assert isinstance(waiter.join(5).error, JobNotFoundError)
