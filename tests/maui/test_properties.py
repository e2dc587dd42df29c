"""Property tests: whatever the nodes, jobs, reservations and policies, no iteration
overcommits a node, starts a job inside a reservation whose ACL refuses it, or lets
backfill delay a job reservation."""

from __future__ import annotations

import heapq

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grid_tasks.maui import ACL, Job, Node, Reservation, ReservationRefused, Scheduler, SchedulerConfig

USERS = ("u0", "u1", "u2")


@st.composite
def scenarios(draw):
    nodes = [Node(f"n{i}", procs=draw(st.integers(1, 6))) for i in range(draw(st.integers(1, 4)))]
    resv = []
    for i in range(draw(st.integers(0, 3))):
        start = draw(st.integers(0, 80))
        users = draw(st.sets(st.sampled_from(USERS), max_size=2))
        if draw(st.booleans()):
            names = draw(st.sets(st.sampled_from([n.name for n in nodes]), min_size=1, max_size=2))
            resv.append(dict(name=f"r{i}", start=start, end=start + draw(st.integers(1, 60)),
                             nodes=tuple(sorted(names)), acl=ACL.build(users=users)))
        else:
            resv.append(dict(name=f"r{i}", start=start, end=start + draw(st.integers(1, 60)),
                             tasks=draw(st.integers(1, 4)), acl=ACL.build(users=users)))
    jobs = []
    for i in range(draw(st.integers(1, 14))):
        wall = draw(st.integers(1, 50))
        jobs.append((
            Job(f"j{i}", tasks=draw(st.integers(1, 6)), walltime=wall, submit_time=draw(st.integers(0, 60)),
                user=draw(st.sampled_from(USERS)), priority=draw(st.integers(0, 3)),
                tasks_per_node=draw(st.sampled_from([None, None, 1, 2]))),
            draw(st.integers(1, wall)),  # actual run time, never beyond the walltime
        ))
    release = draw(st.one_of(st.none(), st.tuples(st.integers(0, 2), st.integers(1, 90))))
    meta = draw(st.one_of(st.none(), st.tuples(st.integers(0, len(jobs) - 1), st.integers(0, 40))))
    cfg = SchedulerConfig(
        reservation_depth=draw(st.sampled_from([1, 2, None])),
        reservation_policy="HIGHEST",
        backfill_policy=draw(st.sampled_from(["FIRSTFIT", "BESTFIT", "GREEDY", "NONE"])),
        node_allocation_policy=draw(st.sampled_from(["FIRSTAVAILABLE", "LASTAVAILABLE", "MINRESOURCE"])),
        task_distribution=draw(st.sampled_from(["PACK", "ROUNDROBIN"])),
    )
    return nodes, resv, jobs, cfg, release, meta


def simulate(nodes, resv, jobs, cfg, release=None, meta=None):
    """Replay; returns the runs, the job reservations promised, and the administrative
    reservations with the time each stopped holding (release, or its job's end)."""
    sched = Scheduler(nodes, cfg)
    made = []
    for r in resv:
        try:
            made.append(sched.add_reservation(Reservation(**r), now=0))
        except ReservationRefused:
            pass
    if meta is not None:  # the metascheduler reserves for one job before it is submitted
        job = jobs[meta[0]][0]
        try:
            made.append(sched.reserve(job, start=max(meta[1], job.submit_time), duration=job.walltime,
                                      acl=ACL.build(jobs=[job.id]), now=0))
        except ReservationRefused:
            pass
    until = {r.name: r.end for r in made}
    run = {job.id: actual for job, actual in jobs}
    heap = [(job.submit_time, 0, i, job) for i, (job, _) in enumerate(jobs)]
    if release is not None and release[0] < len(resv):
        heap.append((release[1], 2, -1, resv[release[0]]["name"]))
    heapq.heapify(heap)
    runs, promised, counter, now = [], {}, len(heap), 0.0
    while heap or sched.next_wakeup(now) is not None:
        wake = sched.next_wakeup(now)
        if wake is not None and (not heap or wake < heap[0][0]):
            now = wake
        else:
            now, kind, _, item = heapq.heappop(heap)
            if kind == 0:
                sched.submit(item, now=now)
            elif kind == 1:
                sched.job_ended(item, now=now)
                for r in made:  # a reservation made for one job dies with it
                    if r.acl.jobs == {item}:
                        until[r.name] = min(until[r.name], now)
            elif item in until and until[item] > now:
                sched.release_reservation(item, now=now)
                until[item] = now
        res = sched.iterate(now)
        for r in res.reservations_created:
            if r.job_id is not None and r.kind.value == "job":
                promised[r.job_id] = r.start
        for s in res.started:
            job = next(j for j, _ in jobs if j.id == s.job_id)
            runs.append((job, s.time, s.time + run[s.job_id], dict(s.allocation)))
            counter += 1
            heapq.heappush(heap, (s.time + run[s.job_id], 1, counter, s.job_id))
    return runs, promised, [(r, until[r.name]) for r in made]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_iterations_keep_the_invariants(scenario):
    nodes, resv, jobs, cfg, release, meta = scenario
    runs, promised, made = simulate(nodes, resv, jobs, cfg, release, meta)
    caps = {n.name: n.procs for n in nodes}
    instants = {t for _, s, e, _ in runs for t in (s, e)} | {r.start for r, _ in made}
    for t in instants:
        for name, cap in caps.items():
            on = [(job, alloc[name]) for job, s, e, alloc in runs if s <= t < e and name in alloc]
            assert sum(k * job.procs_per_task for job, k in on) <= cap, ("overcommit", name, t)
            for r, end in made:
                if r.start <= t < end and name in r.allocation:
                    held = r.allocation[name] * (r.procs_per_task if r.tasks else 1)
                    outsiders = sum(k for job, k in on if not r.acl.admits(job))
                    assert outsiders + held <= cap, ("reservation overrun", r.name, name, t)
    for r, end in made:
        if not r.tasks:  # whole nodes: nobody outside the ACL may run there meanwhile
            for job, s, e, alloc in runs:
                if s < end and r.start < e and set(alloc) & set(r.nodes):
                    assert r.acl.admits(job), ("acl", r.name, job.id)
    started = {job.id: s for job, s, _, _ in runs}
    for job_id, promise in promised.items():
        # HIGHEST keeps a reservation until the job runs and backfill never delays it
        assert job_id in started and started[job_id] <= promise, (job_id, promise)
    assert len(started) == len(runs)  # no job started twice
