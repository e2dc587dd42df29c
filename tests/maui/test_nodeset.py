"""The engine over a NodeSet (fresh nodes answered per class: maui/fresh.py) against the
engine over a plain node list, in lock-step: the same starts on the same nodes at the
same times, the same reservations, over random clusters, jobs and policies; the set's
nodes are never changed; and a wrong fresh book-keeping shows as a different decision."""

from __future__ import annotations

import random

import pytest

from grid_tasks.maui import ACL, Job, Node, Reservation, Scheduler, SchedulerConfig
from grid_tasks.maui.config import AvailabilityPolicy, BackfillPolicy, ReservationPolicy
from grid_tasks.maui.nodeset import NodeSet
from grid_tasks.states import NodeState

from .lockstep import drive, events_of

POLICIES = ("FIRSTAVAILABLE", "MINRESOURCE", "LASTAVAILABLE", "CPULOAD", "PRIORITY")


def _nodes(rng: random.Random, count: int) -> list[Node]:
    """Two or three classes of like nodes, interleaved by name, one odd node."""
    shapes = [(4, 4096, frozenset()), (8, 8192, frozenset({"fast"})), (2, 1024, frozenset())]
    kinds = rng.randint(1, 3)
    out = []
    for i in range(count):
        procs, mem, feats = shapes[rng.randrange(kinds)]
        out.append(Node(f"n{i:03d}", procs, mem, features=feats))
    out.append(Node("odd", 3, 2048, utilized_procs=1, priority=5.0, load=0.5))
    return out


def _config(rng: random.Random) -> SchedulerConfig:
    return SchedulerConfig(
        reservation_depth=rng.choice([0, 1, 4, None]),
        reservation_policy=rng.choice(list(ReservationPolicy)),
        backfill_policy=rng.choice(list(BackfillPolicy)),
        node_allocation_policy=rng.choice(POLICIES),
        task_distribution=rng.choice(["PACK", "ROUNDROBIN"]),
        availability_policy=rng.choice([AvailabilityPolicy.COMBINED,
                                         AvailabilityPolicy.DEDICATED]))


def _jobs(rng: random.Random, n: int) -> list[tuple[Job, float | None]]:
    out, t = [], 0.0
    for i in range(n):
        t += rng.choice([0.0, 0.0, 5.0, 30.0])
        tasks = rng.choice([1, 1, 1, 2, 3, 6, 12, 40])
        job = Job(str(i), tasks=tasks, procs_per_task=rng.choice([1, 1, 2]),
                  walltime=rng.choice([60.0, 600.0, 3600.0]), submit_time=t,
                  user=rng.choice(["u1", "u2"]),
                  mem_per_task=rng.choice([0, 0, 512]),
                  tasks_per_node=rng.choice([None, None, None, 2]),
                  features=rng.choice([frozenset(), frozenset(), frozenset({"fast"})]))
        out.append((job, rng.choice([None, None, None, 45.0])))
    return out


def _view(res) -> tuple:
    return ([(s.job_id, s.time, dict(s.allocation)) for s in res.started],
            sorted((r.name, r.start, r.end, tuple(sorted(r.allocation.items())))
                   for r in res.reservations_created))


def _pair(nodes: list[Node], config: SchedulerConfig) -> tuple[list[Scheduler], NodeSet]:
    shared = NodeSet.of(n.copy() for n in nodes)
    return [Scheduler([n.copy() for n in nodes], config), Scheduler(shared, config)], shared


def _snapshot(ns: NodeSet) -> list[tuple]:
    return [(n.name, n.state, n.utilized_procs, n.load) for n in ns.nodes.values()]


@pytest.mark.parametrize("seed", range(40))
def test_lockstep_with_the_plain_engine(seed: int) -> None:
    rng = random.Random(seed)
    nodes = _nodes(rng, rng.choice([3, 12, 40]))
    config = _config(rng)
    pair, shared = _pair(nodes, config)
    before = _snapshot(shared)
    if rng.random() < 0.5:  # an administrative reservation on a node and a shared one
        for s in pair:
            s.add_reservation(Reservation("adm", 100.0, 5000.0, acl=ACL.build(users=["u1"]),
                                          nodes=(nodes[1].name,)), 0.0)
            s.add_reservation(Reservation("any", 0.0, 900.0, acl=ACL.build(users=["u2"]),
                                          tasks=3), 0.0)
    down = nodes[rng.randrange(len(nodes))].name

    def after(both) -> None:  # a node goes down, comes back, reports load
        step = after.count = getattr(after, "count", 0) + 1
        if step == 3:
            both(lambda s: s.update_node(down, 0.0, state=NodeState.DOWN))
        elif step == 6:
            both(lambda s: s.update_node(down, 0.0, state=NodeState.IDLE, utilized_procs=1))

    jobs = _jobs(rng, 60)
    run = {job.id: rng.choice([10.0, 100.0, 3000.0]) for job, _ in jobs}
    log = drive(pair, events_of(jobs), run, _view, after=after)
    assert any(view[0] for _, view in log)  # jobs did start
    assert _snapshot(shared) == before  # the set's nodes were copied, never changed


@pytest.mark.parametrize("seed", range(10))
def test_fresh_schedulers_over_one_set_decide_as_over_lists(seed: int) -> None:
    """As the live shell does: a new scheduler per iteration from the same state (running
    jobs restored, the queue submitted), the node set shared by all of them."""
    rng = random.Random(100 + seed)
    nodes = _nodes(rng, 30)
    config = _config(rng)
    shared = NodeSet.of(n.copy() for n in nodes)
    running: dict[str, tuple[Job, float, dict[str, int]]] = {}
    queue = [job for job, _ in _jobs(rng, 40)]
    for step in range(12):
        now = 100.0 * step
        results = []
        for base in ([n.copy() for n in nodes], shared):
            s = Scheduler(base, config)
            for job, start, alloc in running.values():
                s.restore_running(job, start, alloc, now)
            for job in queue:
                if job.submit_time <= now and job.id not in running:
                    s.submit(job, now)
            results.append(_view(s.iterate(now)))
        assert results[0] == results[1]
        for jid, t, alloc in results[0][0]:
            job = next(j for j in queue if j.id == jid)
            running[jid] = (job, t, alloc)
        running = {k: v for k, v in running.items() if v[1] + 150.0 > now}


def test_a_wrong_fresh_book_shows_in_the_decisions() -> None:
    """The lock-step can fail: forgetting that a node took a job (its profiles dropped,
    so it reads fresh again) starts the next job there, where the plain engine does not."""
    nodes = [Node(f"n{i}", 1) for i in range(3)]
    pair, _ = _pair(nodes, SchedulerConfig())
    jobs = [(Job(str(i), walltime=1000.0, submit_time=float(i)), None) for i in range(4)]

    def forget(both) -> None:
        eng = pair[1].engine
        for name in [n for n in eng.prof if eng.placements]:
            dict.__delitem__(eng.prof, name)
            eng._taken[eng.ns.class_of[name]] -= 1

    with pytest.raises(AssertionError):
        drive(pair, events_of(jobs), {str(i): 5000.0 for i in range(4)}, _view, after=forget)


def test_few_nodes_are_looked_at_one_by_one() -> None:
    """What makes it cheap: starting a job on a cluster of 1,000 like nodes gives its own
    profiles to the node it starts on, not to every node."""
    shared = NodeSet.of(Node(f"n{i:04d}", 4, 4096) for i in range(1000))
    s = Scheduler(shared, SchedulerConfig(node_allocation_policy="MINRESOURCE"))
    s.submit(Job("1", tasks=6, walltime=60.0), 0.0)
    assert not s.nothing_free(0.0)
    started = s.iterate(0.0).started
    assert [dict(st.allocation) for st in started] == [{"n0000": 4, "n0001": 2}]
    assert sorted(s.engine.prof) == ["n0000", "n0001"]
