"""Each scheduling policy and parameter changes decisions: a test per knob."""

import pytest

from grid_tasks.maui import Job, Node, Scheduler, SchedulerConfig
from grid_tasks.states import NodeState


def started(res):
    return [s.job_id for s in res.started]


def blocked_pool(config: SchedulerConfig, candidates: list[tuple[str, int, float]]) -> Scheduler:
    """20 processors, 10 busy until t=100, a 20-processor head waiting; then candidates."""
    sched = Scheduler([Node("n0", procs=20)], config)
    sched.restore_running(Job("run", tasks=10, walltime=100), 0, {"n0": 10}, now=0)
    sched.submit(Job("head", tasks=20, walltime=50, submit_time=0), now=0)
    for i, (jid, procs, wall) in enumerate(candidates):
        sched.submit(Job(jid, tasks=procs, walltime=wall, submit_time=1 + i), now=0)
    return sched


def test_backfill_none_starts_nothing_behind_a_blocked_job():
    cands = [("small", 2, 10)]
    assert started(blocked_pool(SchedulerConfig(backfill_policy="NONE"), cands).iterate(0)) == []
    assert started(blocked_pool(SchedulerConfig(backfill_policy="FIRSTFIT"), cands).iterate(0)) == ["small"]


FILL = [("c3", 3, 50), ("c6", 6, 50), ("c5a", 5, 50), ("c5b", 5, 50)]


def test_firstfit_takes_jobs_in_priority_order():
    res = blocked_pool(SchedulerConfig(backfill_policy="FIRSTFIT"), FILL).iterate(0)
    assert started(res) == ["c3", "c6"]


def test_bestfit_takes_the_largest_fitting_job_first():
    res = blocked_pool(SchedulerConfig(backfill_policy="BESTFIT"), FILL).iterate(0)
    assert started(res) == ["c6", "c3"]


def test_greedy_fills_the_window_completely():
    res = blocked_pool(SchedulerConfig(backfill_policy="GREEDY"), FILL).iterate(0)
    assert sorted(started(res)) == ["c5a", "c5b"]


def test_backfill_never_delays_the_reservation():
    # 'long' fits now but would still run at t=100, when the head needs all 20 processors
    res = blocked_pool(SchedulerConfig(), [("long", 2, 500), ("short", 2, 100)]).iterate(0)
    assert started(res) == ["short"]
    assert [(r.job_id, r.start) for r in res.reservations_created] == [("head", 100)]


def _two_blocked(depth):
    sched = Scheduler([Node("n0", procs=10)], SchedulerConfig(reservation_depth=depth, fast_path=False))
    sched.restore_running(Job("r1", tasks=4, walltime=100), 0, {"n0": 4}, now=0)
    sched.restore_running(Job("r2", tasks=4, walltime=300), 0, {"n0": 4}, now=0)
    sched.submit(Job("b1", tasks=10, walltime=100, submit_time=1), now=0)  # earliest at 300
    sched.submit(Job("b2", tasks=6, walltime=100, submit_time=2), now=0)   # earliest at 100
    sched.submit(Job("bf", tasks=2, walltime=250, submit_time=3), now=0)   # fits now, until 250
    return sched


def test_reservation_depth_protects_more_jobs():
    one, two = _two_blocked(1).iterate(0), _two_blocked(2).iterate(0)
    # depth 1 protects only b1, so bf runs through b2's window; depth 2 keeps b2's start
    assert started(one) == ["bf"] and started(two) == []
    assert sorted((r.job_id, r.start) for r in two.reservations_created) == [("b1", 300), ("b2", 100)]


def test_reservation_depth_two_reserves_the_second_blocked_job():
    sched = Scheduler([Node("n0", procs=10)], SchedulerConfig(reservation_depth=2, fast_path=False))
    sched.restore_running(Job("r", tasks=10, walltime=100), 0, {"n0": 10}, now=0)
    sched.submit(Job("b1", tasks=8, walltime=100, submit_time=1), now=0)
    sched.submit(Job("b2", tasks=8, walltime=100, submit_time=2), now=0)
    res = sched.iterate(0)
    assert sorted((r.job_id, r.start) for r in res.reservations_created) == [("b1", 100), ("b2", 200)]
    one = Scheduler([Node("n0", procs=10)], SchedulerConfig(reservation_depth=1, fast_path=False))
    one.restore_running(Job("r", tasks=10, walltime=100), 0, {"n0": 10}, now=0)
    one.submit(Job("b1", tasks=8, walltime=100, submit_time=1), now=0)
    one.submit(Job("b2", tasks=8, walltime=100, submit_time=2), now=0)
    assert [r.job_id for r in one.iterate(0).reservations_created] == ["b1"]


@pytest.mark.parametrize("policy, holder", [("HIGHEST", "low"), ("CURRENTHIGHEST", "high")])
def test_reservation_policy_decides_who_keeps_the_reservation(policy, holder):
    cfg = SchedulerConfig(reservation_policy=policy, fast_path=False)
    sched = Scheduler([Node("n0", procs=10)], cfg)
    sched.restore_running(Job("r", tasks=10, walltime=100), 0, {"n0": 10}, now=0)
    sched.submit(Job("low", tasks=8, walltime=100, submit_time=0), now=0)
    sched.iterate(0)
    sched.submit(Job("high", tasks=8, walltime=100, submit_time=5, priority=1e6), now=5)
    sched.iterate(5)
    held = [r.job_id for r in sched.reservations() if r.kind.value == "job"]
    assert held == [holder]


def test_reservation_policy_never_makes_no_reservation():
    sched = blocked_pool(SchedulerConfig(reservation_policy="NEVER"), [("long", 2, 500)])
    res = sched.iterate(0)
    assert res.reservations_created == [] and started(res) == ["long"]


def _alloc_sched(policy: str) -> Scheduler:
    nodes = [
        Node("a", procs=8, load=0.9, priority=1),
        Node("b", procs=4, load=0.1, priority=5),
        Node("c", procs=8, load=0.5, priority=2),
    ]
    sched = Scheduler(nodes, SchedulerConfig(node_allocation_policy=policy))
    # c will be needed by a reservation at t=50, so its free window is the tightest
    sched.add_reservation(__import__("grid_tasks.maui", fromlist=["Reservation"]).Reservation(
        name="maint", start=50, end=60, nodes=("c",)))
    sched.submit(Job("j", tasks=1, walltime=40), now=0)
    return sched


@pytest.mark.parametrize("policy, node", [
    ("FIRSTAVAILABLE", "a"), ("LASTAVAILABLE", "c"), ("MINRESOURCE", "b"), ("CPULOAD", "b"),
    ("PRIORITY", "b"),
])
def test_node_allocation_policy_picks_the_node(policy, node):
    res = _alloc_sched(policy).iterate(0)
    assert [dict(s.allocation) for s in res.started] == [{node: 1}]


def test_cpuload_and_priority_differ_from_firstavailable():
    nodes = [Node("a", procs=4, load=0.8, priority=0), Node("b", procs=4, load=0.2, priority=9)]
    for policy, want in (("CPULOAD", "b"), ("PRIORITY", "b"), ("FIRSTAVAILABLE", "a")):
        sched = Scheduler([Node(**vars(n)) for n in nodes], SchedulerConfig(node_allocation_policy=policy))
        sched.submit(Job("j", tasks=1, walltime=10), now=0)
        assert list(sched.iterate(0).started[0].allocation) == [want]


@pytest.mark.parametrize("mode, tpn, want", [
    ("PACK", None, {"n0": 4}),
    ("ROUNDROBIN", None, {"n0": 2, "n1": 2}),
    ("PACK", 1, {"n0": 1, "n1": 1, "n2": 1, "n3": 1}),
])
def test_task_distribution(mode, tpn, want):
    sched = Scheduler([Node(f"n{i}", procs=4) for i in range(2 if tpn is None else 4)],
                      SchedulerConfig(task_distribution=mode))
    sched.submit(Job("j", tasks=4, walltime=10, tasks_per_node=tpn), now=0)
    assert dict(sched.iterate(0).started[0].allocation) == want


@pytest.mark.parametrize("policy, runs", [("COMBINED", False), ("DEDICATED", True)])
def test_availability_policy_counts_utilized_resources(policy, runs):
    node = Node("n0", procs=4, utilized_procs=3)
    sched = Scheduler([node], SchedulerConfig(availability_policy=policy))
    sched.submit(Job("j", tasks=2, walltime=10), now=0)
    assert bool(sched.iterate(0).started) is runs


def test_memory_per_task_spreads_tasks():
    sched = Scheduler([Node("n0", procs=4, memory=1000), Node("n1", procs=4, memory=1000)])
    sched.submit(Job("j", tasks=2, walltime=10, mem_per_task=600), now=0)
    assert dict(sched.iterate(0).started[0].allocation) == {"n0": 1, "n1": 1}


def test_features_and_node_states_restrict_placement():
    nodes = [Node("n0", procs=4), Node("n1", procs=4, features={"gpu"}),
             Node("n2", procs=4, features={"gpu"}, state=NodeState.DOWN)]
    sched = Scheduler(nodes)
    sched.submit(Job("g", tasks=6, walltime=10, features={"gpu"}), now=0)
    sched.submit(Job("g1", tasks=4, walltime=10, features={"gpu"}), now=0)
    res = sched.iterate(0)
    assert [(s.job_id, dict(s.allocation)) for s in res.started] == [("g1", {"n1": 4})]
    sched.update_node("n2", now=1, state=NodeState.IDLE)
    sched.job_ended("g1", now=1)
    assert [dict(s.allocation) for s in sched.iterate(1).started] == [{"n1": 4, "n2": 2}]


def test_holds_and_dependencies_make_jobs_infeasible():
    sched = Scheduler([Node("n0", procs=8)])
    sched.submit(Job("held", tasks=1, walltime=10, holds={"user"}), now=0)
    sched.submit(Job("first", tasks=1, walltime=10), now=0)
    sched.submit(Job("after", tasks=1, walltime=10, depends_on=("first",)), now=0)
    assert started(sched.iterate(0)) == ["first"]
    sched.job_ended("first", now=5)
    assert started(sched.iterate(5)) == ["after"]
