"""Unlike DUROC, the runtime's calls are safe from several threads at once."""

from __future__ import annotations

import collections
from concurrent.futures import ThreadPoolExecutor

from grid_tasks.duroc.store import CoordinationStore
from grid_tasks.duroc.store_models import SubjobSpec
from grid_tasks.runtime import Runtime, RuntimeEnv

SENDERS, PER_SENDER, TAGS = 6, 40, ("red", "green", "blue")


def runtimes(store: CoordinationStore, job: str, sizes: list[int]) -> list[list[Runtime]]:
    store.create_job(job, [SubjobSpec(f"s{i}", n) for i, n in enumerate(sizes)])
    url = store.grant_access(job)
    return [[Runtime(RuntimeEnv(url, job, address, rank, size, f"s{address}"))
             for rank in range(size)] for address, size in enumerate(sizes)]


def test_concurrent_senders_and_receivers_lose_and_duplicate_nothing(
        store: CoordinationStore) -> None:
    (sender, receiver), = runtimes(store, "threads", [2])
    total_per_tag = SENDERS * PER_SENDER // len(TAGS)

    def send_all(thread: int) -> None:
        for seq in range(PER_SENDER):
            tag = TAGS[(thread + seq) % len(TAGS)]
            sender.intra_subjob_send(1, tag, f"{thread}:{seq}".encode())

    def receive_half(tag: str) -> list[tuple[str, bytes]]:
        return [(tag, receiver.intra_subjob_receive(tag, timeout=20))
                for _ in range(total_per_tag // 2)]

    with ThreadPoolExecutor(SENDERS + 2 * len(TAGS)) as pool:
        receiving = [pool.submit(receive_half, tag) for tag in TAGS for _ in range(2)]
        for done in [pool.submit(send_all, t) for t in range(SENDERS)]:
            done.result()
        received = [item for future in receiving for item in future.result()]

    expected = {(TAGS[(t + s) % len(TAGS)], f"{t}:{s}".encode())
                for t in range(SENDERS) for s in range(PER_SENDER)}
    assert len(received) == len(expected) == SENDERS * PER_SENDER
    assert set(received) == expected  # same size and same set: no loss, no duplicate
    counts = collections.Counter(tag for tag, _ in received)
    assert all(n == total_per_tag for n in counts.values())


def test_concurrent_group_joins_and_bootstraps(store: CoordinationStore) -> None:
    groups = runtimes(store, "threads2", [1, 1, 1])
    store.release("threads2", require_complete=False)
    leaders = [group[0] for group in groups]

    def structure(rt: Runtime) -> tuple[int, ...]:
        return rt.inter_subjob_structure(timeout=20).remote_addresses

    def exchange(rt: Runtime, round_no: int) -> list[bytes]:
        return rt.bootstrap_subjob_exchange(f"{rt.env.subjob}/{round_no}".encode(), timeout=20)

    with ThreadPoolExecutor(12) as pool:
        layouts = [pool.submit(structure, rt) for rt in leaders for _ in range(3)]
        assert [f.result() for f in layouts] == [(1, 2)] * 3 + [(0, 2)] * 3 + [(0, 1)] * 3
        # each leader runs its rounds one after the other, the leaders in parallel
        rounds = [pool.submit(lambda rt=rt: [exchange(rt, r) for r in range(3)])
                  for rt in leaders]
        results = [f.result() for f in rounds]
    for per_leader in results:
        assert per_leader == [[f"{a}/{r}".encode() for a in range(3)] for r in range(3)]
    store.purge("threads2")
