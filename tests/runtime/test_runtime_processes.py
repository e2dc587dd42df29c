"""Real job processes, launched as the job manager will, against the store's control calls.

The "control side" here is the store's own API (await entries, release, abort,
purge) - the very calls the DUROC control tasks make, not a stand-in.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable

from grid_tasks.duroc.store import CoordinationStore
from grid_tasks.duroc.store_models import SubjobSpec
from grid_tasks.states import SubjobStartType
from tests.runtime.conftest import PROGRAM, Proc


def outputs(procs: list[Proc]) -> list[dict[str, object]]:
    results = []
    for proc in procs:
        code, out, err = proc.finish()
        assert code == 0, f"subjob {proc.subjob} rank {proc.rank} failed:\n{err}"
        results.append(json.loads(out))
    return results


def test_two_subjobs_pass_the_barrier_together_and_talk(
        store: CoordinationStore, launch: Callable[..., list[Proc]]) -> None:
    store.create_job("happy", [SubjobSpec("left", 2), SubjobSpec("right", 3)])
    url = store.grant_access("happy")
    procs = launch(url, "happy", 0, "left", 2) + launch(url, "happy", 1, "right", 3)
    snapshot = store.await_entries("happy", timeout=30)
    assert [s.entered for s in snapshot.subjobs] == [2, 3]
    time.sleep(0.3)
    assert all(p.popen.poll() is None for p in procs), "a process passed an unreleased barrier"
    released_at = time.time()
    store.release("happy")
    results = outputs(procs)

    assert all(r["passed"] >= released_at for r in results)
    for proc, result in zip(procs, results):
        size = 2 if proc.subjob == 0 else 3
        prev = (proc.rank - 1) % size
        assert result["ring"] == {t: f"{t} from {prev}" for t in ("t1", "t2", "t3")}
        if proc.rank:
            assert result["refused"] == ["NotRankZeroError"] * 4
    leaders = [r for p, r in zip(procs, results) if p.rank == 0]
    assert [r["group"] for r in leaders] == [["left", "right"]] * 2
    assert [r["remotes"] for r in leaders] == [[1], [0]]
    assert [r["infos"] for r in leaders] == [["left:2", "right:3"]] * 2
    assert [r["hellos"] for r in leaders] == [["hello from right"], ["hello from left"]]

    assert store.purge("happy") > 0
    assert list(store.client.scan_iter(match="grid_tasks:duroc:happy:*")) == []
    assert "grid_tasks-job-happy" not in store.client.acl_users()


def test_abort_makes_waiting_processes_exit_with_the_typed_error(
        store: CoordinationStore, launch: Callable[..., list[Proc]]) -> None:
    # subjob "never" stands for a strict subjob whose processes could not start
    store.create_job("doomed", [SubjobSpec("a", 1), SubjobSpec("b", 2), SubjobSpec("never", 1)])
    url = store.grant_access("doomed")
    barrier_only = [sys.executable, str(PROGRAM), "barrier"]
    procs = (launch(url, "doomed", 0, "a", 1, barrier_only)
             + launch(url, "doomed", 1, "b", 2, barrier_only))
    store.await_entries("doomed", [0, 1], timeout=30)
    store.abort("doomed", "subjob 'never' failed: EXECUTABLE_NOT_FOUND")
    for proc in procs:
        code, out, err = proc.finish()
        assert code != 0 and out == ""
        assert "BarrierAbortedError" in err and "EXECUTABLE_NOT_FOUND" in err
    store.purge("doomed")


def test_no_barrier_subjob_runs_and_talks_without_a_barrier(
        store: CoordinationStore, launch: Callable[..., list[Proc]]) -> None:
    store.create_job("free", [SubjobSpec("gated", 1),
                              SubjobSpec("free", 3, SubjobStartType.NO_BARRIER)])
    url = store.grant_access("free")
    ring_only = [sys.executable, str(PROGRAM), "ring"]
    results = outputs(launch(url, "free", 1, "free", 3, ring_only))
    assert [r["ring"]["t2"] for r in results] == ["t2 from 2", "t2 from 0", "t2 from 1"]
    assert store.snapshot("free").state.value == "open"  # never released, never needed
    store.purge("free")


def test_credentials_of_one_job_do_not_open_another(
        store: CoordinationStore, launch: Callable[..., list[Proc]]) -> None:
    store.create_job("mine", [SubjobSpec("a", 1)])
    store.create_job("theirs", [SubjobSpec("a", 1)])
    url = store.grant_access("mine")
    # a process of "mine" pretending to belong to "theirs"
    proc, = launch(url, "theirs", 0, "a", 1, [sys.executable, str(PROGRAM), "barrier"])
    code, out, err = proc.finish()
    assert code != 0 and "AccessDeniedError" in err
    assert store.snapshot("theirs").subjobs[0].entered == 0
    store.purge("mine")
    store.purge("theirs")
