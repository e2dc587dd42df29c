"""The inter-subjob group and the runtime's refusals, with in-process Runtimes."""

from __future__ import annotations

import contextlib
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from grid_tasks.duroc.store import CoordinationStore
from grid_tasks.duroc.store_models import SubjobSpec
from grid_tasks.runtime import (
    BarrierAbortedError, BarrierTimeoutError, JobNotFoundError, NotInGroupError, Runtime,
    RuntimeEnv, RuntimeMisuseError,
)
from grid_tasks.states import SubjobCommsType, SubjobStartType


def leaders(store: CoordinationStore, job: str, specs: list[SubjobSpec]) -> list[Runtime]:
    store.create_job(job, specs)
    url = store.grant_access(job)
    return [Runtime(RuntimeEnv(url, job, address, 0, spec.size, spec.label))
            for address, spec in enumerate(specs)]


def test_independent_subjobs_stay_out_of_the_group(store: CoordinationStore) -> None:
    a, loner, c = leaders(store, "g", [
        SubjobSpec("a", 1), SubjobSpec("loner", 1, comms_type=SubjobCommsType.INDEPENDENT),
        SubjobSpec("c", 1, SubjobStartType.NO_BARRIER)])
    store.release("g", require_complete=False)
    with pytest.raises(NotInGroupError, match="'loner' is independent"):
        loner.inter_subjob_structure(timeout=2)
    with ThreadPoolExecutor(2) as pool:
        exchanges = [pool.submit(rt.bootstrap_subjob_exchange, rt.env.label.encode(), 10)
                     for rt in (c, a)]
        assert [f.result() for f in exchanges] == [[b"a", b"c"]] * 2
    layout = a.inter_subjob_structure()
    assert [s.label for s in layout.subjobs] == ["a", "c"]
    assert (layout.local_index, layout.remote_addresses) == (0, (2,))
    with pytest.raises(RuntimeMisuseError, match="no subjob at address 1"):
        a.inter_subjob_send(1, "x", b"to the loner")
    store.purge("g")


def test_group_join_waits_for_release_and_fails_with_the_job(store: CoordinationStore) -> None:
    a, b = leaders(store, "g2", [SubjobSpec("a", 1), SubjobSpec("b", 1)])
    with ThreadPoolExecutor(2) as pool:
        joining = pool.submit(a.inter_subjob_structure, 10)
        time.sleep(0.2)
        assert not joining.done()  # the group is the released structure's: wait for it
        store.release("g2", require_complete=False)
        time.sleep(0.1)
        assert not joining.done()  # and for every member
        assert b.inter_subjob_structure(timeout=5).remote_addresses == (0,)
        assert joining.result(timeout=5).remote_addresses == (1,)

    c, _ = leaders(store, "g3", [SubjobSpec("c", 1), SubjobSpec("d", 1)])
    store.release("g3", require_complete=False)
    with pytest.raises(BarrierTimeoutError, match="group incomplete"):
        c.inter_subjob_structure(timeout=0.3)
    e, _ = leaders(store, "g4", [SubjobSpec("e", 1), SubjobSpec("f", 1)])
    with ThreadPoolExecutor(1) as pool:
        joining = pool.submit(e.inter_subjob_structure, 10)
        time.sleep(0.1)
        store.abort("g4", "cancelled by user")
        with pytest.raises(BarrierAbortedError, match="cancelled by user"):
            joining.result(timeout=5)


def test_runtime_refusals(store: CoordinationStore) -> None:
    rt, = leaders(store, "r", [SubjobSpec("a", 2)])
    with pytest.raises(RuntimeMisuseError, match="destination rank 2 outside"):
        rt.intra_subjob_send(2, "t", b"x")
    with pytest.raises(RuntimeMisuseError, match="reserved"):
        rt.intra_subjob_send(1, "grid_tasks.bootstrap.0", b"x")
    with pytest.raises(RuntimeMisuseError, match="bytes"):
        rt.intra_subjob_send(1, "t", "not bytes")  # type: ignore[arg-type]
    wrong_size = Runtime(RuntimeEnv(rt.env.url, "r", 0, 0, 3))
    with pytest.raises(RuntimeMisuseError, match="process count 3 differs"):
        wrong_size.barrier(timeout=1)


@hsettings(max_examples=25, deadline=None,
           suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sends=st.lists(st.sampled_from("ABC"), min_size=1, max_size=12), seed=st.randoms())
def test_any_arrival_order_any_receive_order_keeps_per_tag_fifo(
        store: CoordinationStore, sends: list[str], seed: object) -> None:
    job = "fifo"
    with contextlib.suppress(JobNotFoundError):  # an earlier failing example's leftovers
        store.purge(job)
    store.create_job(job, [SubjobSpec("a", 2)])
    # both ranks share the test's store client (the URL is then only informational)
    rt = [Runtime(RuntimeEnv("redis://shared-client", job, 0, r, 2), store) for r in (0, 1)]
    for n, tag in enumerate(sends):
        rt[0].intra_subjob_send(1, tag, f"{tag}{n}".encode())
    order = list(sends)
    seed.shuffle(order)  # type: ignore[attr-defined]
    got: dict[str, list[bytes]] = {}
    for tag in order:
        got.setdefault(tag, []).append(rt[1].intra_subjob_receive(tag, timeout=1))
    for tag, received in got.items():
        assert received == [f"{tag}{n}".encode() for n, t in enumerate(sends) if t == tag]
    store.purge(job)
