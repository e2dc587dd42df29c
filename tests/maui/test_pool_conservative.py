"""The conservative pool fast path decides exactly as the general engine does.

Two schedulers, one on :class:`ConservativePool` and one on the general engine, are
driven in lock step through the same seeded random workloads (early ends, ends at the
walltime, cancels of waiting jobs, simultaneous events); after every call their
iteration results must be equal.  A deliberately broken fast path must be caught.
"""

from __future__ import annotations

import random

import pytest

from grid_tasks.maui import Job, Node, Scheduler, SchedulerConfig, pool_compiled
from grid_tasks.maui.pool import Pool
from grid_tasks.maui.pool_conservative import ConservativePool
from grid_tasks.maui.reservation_book import ReservationBook
from tests.maui import driver
from tests.maui.lockstep import drive, events_of


def _workload(rng: random.Random, n: int, size: int) -> list[tuple]:
    """(id, submit, estimate, actual run, processors, cancel after or None)."""
    t, out = 0, []
    for i in range(n):
        t += rng.choice([0, 0, 1, 5, 30, 100])
        est = rng.choice([10, 50, 100, 300, 1000])
        run = max(1, min(est, rng.choice([est, est // 2, rng.randint(1, est)])))
        cancel = rng.choice([None] * 6 + [rng.randint(0, 400)])
        out.append((f"j{i}", t, est, run, rng.randint(1, size), cancel))
    return out


def _view(res) -> tuple:
    """What an iteration decided, comparable across the two paths."""
    return ([(s.job_id, s.time, dict(s.allocation)) for s in res.started],
            [(r.name, r.start, r.end) for r in res.reservations_created],
            [(r.name, r.start, r.end) for r in res.reservations_released],
            res.considered, res.backfilled)


def lockstep(work: list[tuple], size: int, **cfg) -> list[tuple]:
    """Drive a fast and a general scheduler together; returns the decisions (asserting equal)."""
    pair = [Scheduler([Node("pool", procs=size)], SchedulerConfig.preset("conservative", fast_path=f, **cfg))
            for f in (True, False)]
    assert isinstance(pair[0].pool, ConservativePool) and pair[1].pool is None
    jobs = [(Job(w[0], tasks=w[4], walltime=w[2], submit_time=w[1]), w[5]) for w in work]
    return drive(pair, events_of(jobs), {w[0]: w[3] for w in work}, _view)


@pytest.fixture(params=["pure", "compiled"])
def core(request, monkeypatch):
    """Each core of the conservative pool in turn (the compiled one where it was built)."""
    if request.param == "compiled" and pool_compiled._conservative is None:
        pytest.skip("compiled core not built")
    monkeypatch.setattr(pool_compiled, "CORE", request.param)
    return request.param


@pytest.mark.parametrize("seed", range(30))
def test_random_workloads_decide_as_the_general_engine(seed, core):
    rng = random.Random(seed)
    size = rng.choice([4, 8, 16, 32])
    log = lockstep(_workload(rng, rng.randint(10, 60), size), size)
    assert any(decided[0] for _, decided in log)  # something started: the run did work


def _forget_pass_regions(monkeypatch):
    """Drop the regions a pass found instead of applying them to everyone next pass (the
    engine's single pass examines the jobs before the one that moved only then)."""
    real = ConservativePool._compress

    def compress(self, now, res):
        real(self, now, res)
        self.regions = []

    monkeypatch.setattr(ConservativePool, "_compress", compress)


@pytest.mark.parametrize("breakage", [
    lambda mp: mp.setattr(ReservationBook, "nominate", lambda *args: []),
    _forget_pass_regions,
], ids=["never-compress", "forget-pass-regions"])
def test_the_comparison_catches_a_broken_fast_path(monkeypatch, breakage):
    monkeypatch.setattr(pool_compiled, "CORE", "pure")  # the breakages are the reference's
    breakage(monkeypatch)
    caught = 0
    for seed in range(30):
        rng = random.Random(seed)
        size = rng.choice([4, 8, 16, 32])
        try:
            lockstep(_workload(rng, rng.randint(10, 60), size), size)
        except AssertionError:
            caught += 1
    assert caught > 0


def test_the_fast_path_is_chosen_only_for_conservative_settings():
    def pool(**cfg):
        return Scheduler([Node("pool", procs=8)], SchedulerConfig(**cfg)).pool

    assert isinstance(pool(reservation_depth=None, reservation_policy="HIGHEST"), ConservativePool)
    assert isinstance(pool(reservation_depth=1, reservation_policy="HIGHEST"), Pool)
    for other in (dict(reservation_depth=None), dict(reservation_depth=3, reservation_policy="HIGHEST"),
                  dict(reservation_depth=None, reservation_policy="HIGHEST", backfill_policy="BESTFIT"),
                  dict(reservation_depth=None, reservation_policy="HIGHEST", fast_path=False)):
        assert not isinstance(pool(**other), (ConservativePool, Pool)), other
    # CURRENTHIGHEST at any depth is a site's configuration: the site pool's (when built)
    assert type(pool(reservation_depth=None)).__name__ in ("SitePool", "NoneType")


def test_hand_over_to_the_general_engine_keeps_reservations(monkeypatch, core):
    """Half way through, a node update moves the state to the general engine: the
    reservations go with it, so no decision changes."""
    rng = random.Random(7)
    work = [w[:5] for w in _workload(rng, 50, 16)]
    plain, _ = driver.replay(work, 16, SchedulerConfig.preset("conservative"))
    real = driver.Scheduler
    made = []

    class Handover:
        def __init__(self, nodes, cfg):
            self.s = real(nodes, cfg)
            made.append(self)

        def __getattr__(self, name):
            return getattr(self.s, name)

        def iterate(self, now):
            if now >= 300 and self.s.pool is not None:
                assert self.s.pool.held()  # there are reservations to hand over
                self.s.update_node("pool", now=now, load=0.5)
            return self.s.iterate(now)

    monkeypatch.setattr(driver, "Scheduler", Handover)
    handed, _ = driver.replay(work, 16, SchedulerConfig.preset("conservative"))
    assert made[0].s.pool is None and handed == plain


def test_queries_see_every_reservation(core):
    sched = Scheduler([Node("pool", procs=4)], SchedulerConfig.preset("conservative"))
    for jid, procs, wall in (("a", 4, 100), ("b", 3, 50), ("c", 2, 30), ("d", 1, 500)):
        sched.submit(Job(jid, tasks=procs, walltime=wall), now=0)
    assert [s.job_id for s in sched.iterate(0).started] == ["a"]
    held = {r.job_id: (r.start, r.end) for r in sched.reservations() if r.kind.value == "job"}
    assert held == {"b": (100, 150), "c": (150, 180), "d": (100, 600)}
    assert sched.next_wakeup(0) == 100
    # showstart builds the engine aside with every reservation: 4 processors after d's
    assert sched.estimate(Job("q", tasks=4, walltime=10), now=0)[0].time == 600
    assert isinstance(sched.pool, ConservativePool)
