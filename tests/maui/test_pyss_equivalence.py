"""The presets reproduce the reference simulator's decisions (pyss) job for job.

The reference answers come from ``pyss_ref``, a brute-force restatement of pyss's
algorithms, so the comparison checks the fast pool path and the general engine alike.
"""

import random

import pytest

from grid_tasks.maui import SchedulerConfig
from tests.maui import driver, pyss_ref

# a hand-made workload on 10 processors: a wide job blocking the queue, short jobs that
# can backfill, jobs ending before their estimate, simultaneous submissions and ends
HANDMADE = [
    ("a1", 0, 100, 100, 6), ("a2", 0, 50, 20, 4), ("a3", 5, 200, 150, 8), ("a4", 6, 30, 30, 2),
    ("a5", 6, 60, 10, 2), ("a6", 10, 400, 400, 10), ("a7", 12, 20, 20, 1), ("a8", 20, 100, 50, 3),
    ("a9", 20, 10, 10, 1), ("a10", 25, 500, 100, 5), ("a11", 30, 40, 40, 4), ("a12", 40, 70, 70, 2),
    ("a13", 50, 30, 5, 7), ("a14", 50, 80, 80, 3), ("a15", 100, 20, 20, 9), ("a16", 100, 100, 100, 1),
    ("a17", 120, 60, 30, 6), ("a18", 150, 15, 15, 2), ("a19", 150, 300, 200, 4), ("a20", 200, 45, 45, 5),
    ("a21", 220, 90, 1, 8), ("a22", 230, 25, 25, 3), ("a23", 250, 100, 100, 10), ("a24", 260, 35, 20, 2),
    ("a25", 300, 50, 50, 6), ("a26", 300, 50, 50, 4), ("a27", 310, 10, 10, 1), ("a28", 400, 200, 120, 7),
    ("a29", 420, 60, 60, 3), ("a30", 450, 5, 5, 10),
]

POLICIES = ["fcfs", "easy", "conservative"]


@pytest.mark.parametrize("fast_path", [True, False])
@pytest.mark.parametrize("policy", POLICIES)
def test_handmade_workload_matches_reference(policy, fast_path):
    expected = pyss_ref.replay(HANDMADE, 10, policy)
    got, _ = driver.replay(HANDMADE, 10, SchedulerConfig.preset(policy, fast_path=fast_path))
    assert got == expected


def test_handmade_workload_policies_really_differ():
    starts = {p: pyss_ref.replay(HANDMADE, 10, p) for p in POLICIES}
    # backfilling must start something earlier than fcfs would; conservative differs from easy
    assert any(starts["easy"][j] < starts["fcfs"][j] for j in starts["fcfs"])
    assert starts["easy"] != starts["conservative"]
    # the wide a6 waits while a1..a3 run; a7 (1 proc, 20 s) is backfilled beside them
    assert starts["easy"]["a7"] < starts["easy"]["a6"]


def _workload(rng: random.Random, n: int, size: int) -> list[tuple]:
    t = 0
    out = []
    for i in range(n):
        t += rng.choice([0, 0, 1, 5, 30, 100])
        est = rng.choice([10, 50, 100, 300, 1000])
        run = max(1, min(est, rng.choice([est, est, est // 2, rng.randint(1, est)])))
        out.append((f"j{i}", t, est, run, rng.randint(1, size)))
    return out


@pytest.mark.parametrize("seed", range(25))
def test_random_workloads_match_reference(seed):
    rng = random.Random(seed)
    size = rng.choice([4, 8, 16])
    work = _workload(rng, rng.randint(5, 35), size)
    for policy in POLICIES:
        expected = pyss_ref.replay(work, size, policy)
        for fast_path in (True, False):
            got, _ = driver.replay(work, size, SchedulerConfig.preset(policy, fast_path=fast_path))
            assert got == expected, (policy, fast_path)


@pytest.mark.parametrize("seed", range(15))
@pytest.mark.parametrize("config", [
    dict(), dict(reservation_policy="NEVER"), dict(reservation_depth=0),
    dict(backfill_policy="NONE", reservation_depth=1),
], ids=["default", "never", "depth0", "none-depth1"])
def test_pool_fast_path_equals_general_engine(seed, config):
    rng = random.Random(1000 + seed)
    size = rng.choice([4, 8, 16])
    work = _workload(rng, rng.randint(5, 35), size)
    fast, s1 = driver.replay(work, size, SchedulerConfig(**config))
    slow, s2 = driver.replay(work, size, SchedulerConfig(fast_path=False, **config))
    assert s1.pool is not None and s2.pool is None
    assert fast == slow
