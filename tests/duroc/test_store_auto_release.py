"""Auto-release barriers: the entry (or deletion) that completes the barrier releases it
atomically in the store, also under a job's own confined runtime credentials."""

from __future__ import annotations

import pytest

from grid_tasks.duroc.store import CoordinationStore
from grid_tasks.duroc.store_errors import BarrierAbortedError
from grid_tasks.duroc.store_models import BarrierState, SubjobSpec
from grid_tasks.states import SubjobStartType


def _events(store: CoordinationStore, job: str) -> list[str]:
    return [f[b"type"].decode() for _, f in store.client.xrange(store.keys(job).events)]


def test_last_entry_releases_and_gets_the_structure_back(store: CoordinationStore) -> None:
    store.create_job("j", [SubjobSpec("a", 2), SubjobSpec("b", 1),
                           SubjobSpec("free", 1, SubjobStartType.NO_BARRIER)], auto_release=True)
    assert store.enter("j", 0, 0)["state"] == "open"
    assert store.enter("j", 1, 0)["state"] == "open"
    reply = store.enter("j", 0, 1)  # the last barrier process: no-barrier subjobs never count
    assert reply["state"] == "released"
    assert [s["label"] for s in reply["structure"]["subjobs"]] == ["a", "b", "free"]
    assert store.snapshot("j").state is BarrierState.RELEASED
    assert _events(store, "j")[-3:] == ["complete", "complete", "released"]
    assert store.release("j").subjobs[0].label == "a"  # the control side's release: a no-op
    assert _events(store, "j").count("released") == 1


def test_a_waiting_process_passes_without_any_control_side_call(
        store: CoordinationStore) -> None:
    store.create_job("j", [SubjobSpec("a", 1), SubjobSpec("b", 1)], auto_release=True)
    runtime = CoordinationStore.from_url(store.grant_access("j"), slice_s=0.5)
    try:
        store.enter("j", 0, 0)
        # under the job's confined ACL user: its entry completes the barrier and releases
        structure = runtime.wait_release("j", 1, 0, timeout=5)
        assert structure is not None and len(structure.subjobs) == 2
        assert runtime.wait_release("j", 0, 0, timeout=5) is not None
    finally:
        runtime.close()


def test_deleting_the_last_missing_subjob_releases(store: CoordinationStore) -> None:
    store.create_job("j", [SubjobSpec("in", 1), SubjobSpec("slow", 2)], auto_release=True)
    store.enter("j", 0, 0)
    store.enter("j", 1, 0)
    assert store.snapshot("j").state is BarrierState.OPEN
    store.delete_subjob("j", "slow")
    snap = store.snapshot("j")
    assert snap.state is BarrierState.RELEASED and [s.label for s in snap.subjobs] == ["in"]


def test_added_subjob_holds_the_barrier_until_it_is_in(store: CoordinationStore) -> None:
    store.create_job("j", [SubjobSpec("a", 1)], auto_release=True)
    info = store.add_subjob("j", SubjobSpec("b", 1))
    assert store.enter("j", 0, 0)["state"] == "open"
    assert store.enter("j", info.address, 0)["state"] == "released"


def test_without_auto_release_only_release_opens(store: CoordinationStore) -> None:
    store.create_job("j", [SubjobSpec("a", 1)])
    assert store.enter("j", 0, 0)["state"] == "open"
    assert store.snapshot("j").state is BarrierState.OPEN
    store.release("j")
    assert store.snapshot("j").state is BarrierState.RELEASED


def test_an_aborted_job_is_never_released_by_an_entry(store: CoordinationStore) -> None:
    store.create_job("j", [SubjobSpec("a", 1)], auto_release=True)
    store.abort("j", "subjob 'b' failed")
    assert store.enter("j", 0, 0)["state"] == "aborted"
    with pytest.raises(BarrierAbortedError):
        store.release("j")
    assert store.snapshot("j").state is BarrierState.ABORTED
