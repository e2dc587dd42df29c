"""Benchmark of the Maui core (issue 4).

1. One iteration with 10,000 idle jobs (mixed sizes and credentials), 1,000 nodes, 50
   administrative reservations and fairshare on, every job considered for backfill
   (target: under 1 s); then the same with per-user and per-group throttles (issue 22:
   under 100 ms).
2. ``estimate`` (showstart) for one job on that state (target: under 50 ms).
3. How the iteration time grows from 1,000 to 10,000 to 50,000 idle jobs.
4. For reference, synthetic event-by-event replays on one processor pool (EASY on the
   pool fast path, conservative on its own fast path), in jobs per second, with
   conservative's cost per job relative to EASY's measured in the same run.

Run: ``.venv/bin/python benchmarks/bench_maui.py``  (``--quick`` skips the 50,000 case,
``--pool`` runs section 4 only)
"""

from __future__ import annotations

import gc
import random
import sys
import time

from grid_tasks.maui import ACL, FSTarget, Job, Node, Reservation, Scheduler, SchedulerConfig

NODES = 1000
PROCS = 8


#: Site-like throttles: 20 running jobs and 256 processors per user while others wait
#: (40 and 512 when the machine would idle), 200 jobs per group.
THROTTLES = {"USER": {"DEFAULT": {"MAXJOB": (20, 40), "MAXPROC": (256, 512)}},
             "GROUP": {"DEFAULT": {"MAXJOB": (200, 400)}}}


def build(n_jobs: int, seed: int = 1, throttles: bool = False) -> tuple[Scheduler, float]:
    rng = random.Random(seed)
    users = [f"u{i}" for i in range(100)]
    cfg = SchedulerConfig(
        throttles=THROTTLES if throttles else {},
        reservation_depth=5, backfill_policy="FIRSTFIT", fs_policy="DEDICATEDPS",
        weights={"FSUSERWEIGHT": 10, "QUEUETIMEWEIGHT": 1, "XFACTORWEIGHT": 5, "PROCWEIGHT": 1},
        fs_targets={"USER": {u: FSTarget(1.0, rng.choice(["", "+", "-"])) for u in users[:50]}},
        fast_path=False,
    )
    nodes = [Node(f"n{i:04d}", procs=PROCS, memory=32000) for i in range(NODES)]
    sched = Scheduler(nodes, cfg)
    now = 100_000.0
    # 50 administrative reservations on 4 nodes each, some now, most later
    for i in range(50):
        start = now + rng.choice([0, 3600, 7200, 36000])
        names = tuple(f"n{(i * 4 + k):04d}" for k in range(4))
        sched.add_reservation(Reservation(name=f"adm{i}", start=start, end=start + 7200, nodes=names,
                                          acl=ACL.build(users=rng.sample(users, 3))), now=now)
    # running jobs fill about 90% of the machine, ending at assorted times
    for i in range(NODES):
        if i < 200 or rng.random() < 0.1:
            continue
        used = PROCS if rng.random() < 0.8 else rng.randint(1, PROCS - 1)
        job = Job(f"r{i}", tasks=used, walltime=rng.choice([3600, 7200, 14400, 43200]),
                  user=rng.choice(users), submit_time=now - 5000)
        sched.restore_running(job, now - rng.uniform(0, 3000), {f"n{i:04d}": used}, now=now)
    for i in range(n_jobs):
        tasks = rng.choice([1, 1, 2, 4, 8, 16, 32, 64, 128])
        sched.submit(Job(f"j{i}", tasks=tasks, walltime=rng.choice([600, 1800, 3600, 14400, 86400]),
                         submit_time=now - rng.uniform(0, 50_000), user=rng.choice(users),
                         group=f"g{rng.randint(0, 9)}", account=f"a{rng.randint(0, 4)}",
                         qos=rng.choice(["normal", "high"])), now=now)
    # a day of finished work so that fairshare has usage to weigh
    for i in range(2000):
        start = now - rng.uniform(3600, 86400)
        sched.fairshare.charge(Job(f"h{i}", user=rng.choice(users)), rng.choice([1, 8, 64]), start, start + 3600)
    return sched, now


def one_iteration(n_jobs: int, throttles: bool = False) -> tuple[float, Scheduler, float, str]:
    sched, now = build(n_jobs, throttles=throttles)
    gc.collect()  # the set-up's garbage is not the iteration's cost
    t0, c0 = time.perf_counter(), time.process_time()
    res = sched.iterate(now)
    el = time.perf_counter() - t0
    info = (f"CPU {(time.process_time() - c0) * 1000:.0f} ms; {res.considered} jobs considered, "
            f"{len(res.started)} started of which {res.backfilled} backfilled, "
            f"{len(res.reservations_created)} reservations")
    return el, sched, now, info


def main() -> None:
    quick = "--quick" in sys.argv
    if "--pool" in sys.argv:
        pool_figures()
        return
    el, sched, now, info = one_iteration(10_000)
    print(f"iteration: 10,000 idle jobs, {NODES} nodes, 50 reservations, fairshare: {el * 1000:.0f} ms "
          f"({info}; target < 1000 ms)")
    el_t, _, _, info_t = one_iteration(10_000, throttles=True)
    print(f"iteration with throttles too: {el_t * 1000:.0f} ms = {el_t / el:.2f}x the same without "
          f"({info_t}; target < 100 ms)")
    t0 = time.perf_counter()
    sched.iterate(now + 1)
    print(f"next iteration, nothing changed: {(time.perf_counter() - t0) * 1000:.0f} ms")
    req = Job("probe", tasks=64, walltime=7200, user="u7")
    t0 = time.perf_counter()
    est = sched.estimate(req, now)
    el = time.perf_counter() - t0
    print(f"estimate (showstart) for a 64-task job: {el * 1000:.1f} ms -> start at +{est[0].time - now:.0f} s "
          f"(target < 50 ms)")
    pool_figures()
    sizes = [1_000, 10_000] + ([] if quick else [50_000])
    base = None
    for n in sizes:
        el = one_iteration(n)[0]
        base = base or el
        print(f"growth: {n:>6,} idle jobs -> {el * 1000:7.0f} ms  (x{el / base:.1f} of 1,000)")


def pool_figures() -> None:
    """Section 4: EASY and conservative pool replays, and their cost ratio."""
    rate = {}
    for policy in ("easy", "conservative"):
        n = 60_000 if policy == "easy" else 10_000
        el = pool_replay(n, policy=policy)
        rate[policy] = n / el
        print(f"pool replay ({policy}, synthetic, 128 processors): {n:,} jobs in {el:.2f} s "
              f"= {n / el:,.0f} jobs/s (core and a minimal event loop)")
    print(f"pool replay: conservative costs {rate['easy'] / rate['conservative']:.1f}x EASY per job")


def pool_replay(n_jobs: int = 60_000, procs: int = 128, policy: str = "easy") -> float:
    """Event-by-event replay of a synthetic trace on one pool, as the simulator drives it."""
    import heapq

    rng = random.Random(3)
    sched = Scheduler([Node("pool", procs=procs)], SchedulerConfig.preset(policy))
    heap, t = [], 0.0
    # offered load about 0.85: mean size ~32 processors x mean run ~4,600 s every ~1,400 s
    for i in range(n_jobs):
        t += rng.expovariate(1 / 1400)
        est = rng.choice([600, 3600, 14400, 43200])
        heap.append((t, 0, i, Job(f"j{i}", tasks=min(procs, 2 ** rng.randint(0, 7)), walltime=est,
                                  submit_time=t), rng.uniform(0.1, 0.5) * est))
    heapq.heapify(heap)
    run = {}
    t0 = time.perf_counter()
    counter = n_jobs
    while heap:
        now, kind, _, item, *rest = heapq.heappop(heap)
        if kind == 0:
            run[item.id] = rest[0]
            sched.submit(item, now=now)
        else:
            sched.job_ended(item, now=now)
        for st in sched.iterate(now).started:
            counter += 1
            heapq.heappush(heap, (now + run[st.job_id], 1, counter, st.job_id))
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
