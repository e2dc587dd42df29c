"""Benchmark of metascheduling (issue 8): the planner and ``simulate --grid``.

1. ``plan()`` for a coallocated job (two subjobs) over 3 and over 8 busy Maui cores
   (2 nodes x 64 processors, 200 queued jobs each, EASY), in plans per second.
2. The grid replay of shared traces (KTH-SP2 + SDSC-SP2, first N job lines each) under
   each metascheduling policy, in jobs per second, with the ratio to the peer measured
   in the same run: the plain multi-cluster replay of the same traces (no grid jobs).

Run: ``.venv/bin/python benchmarks/bench_grid_sim.py [--first N]``  (default N = 3000)
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

from grid_tasks.broker.planner import Need, maui_estimator, plan
from grid_tasks.maui import Job, Node, Scheduler, SchedulerConfig
from grid_tasks.sim.grid import GRID_POLICIES, GridOptions, load_workload
from grid_tasks.sim.grid_policies import run_policy
from grid_tasks.sim.replay import ClusterSpec, Replay

WORKLOADS = Path(__file__).resolve().parents[1] / ".." / "shared" / "workloads"
TRACES = ("KTH-SP2-1996-2.1-cln.swf.gz", "SDSC-SP2-1998-4.2-cln.swf.gz")


def busy_core(seed: int) -> Scheduler:
    rng = random.Random(seed)
    core = Scheduler([Node("a", 64), Node("b", 64)], SchedulerConfig.preset("easy"))
    for i in range(200):
        core.submit(Job(f"j{i}", tasks=rng.randint(1, 64), walltime=rng.randint(60, 36000)), 0.0)
    core.iterate(0.0)
    return core


def bench_plan(n_cores: int, seconds: float = 2.0) -> float:
    estimators = {f"rm{i}": maui_estimator(busy_core(i)) for i in range(n_cores)}
    needs = [Need(24, 3600.0), Need(40, 3600.0)]
    count, begin = 0, time.perf_counter()
    while time.perf_counter() - begin < seconds:
        schedules = plan(needs, estimators, 0.0, limit=8)
        assert schedules, "the busy cores must still give a schedule"
        count += 1
    return count / (time.perf_counter() - begin)


def bench_replays(first: int) -> None:
    paths = [WORKLOADS / name for name in TRACES]
    missing = [p.name for p in paths if not p.exists()]
    if missing:
        print(f"grid replay: skipped, traces not found beside the checkout: {missing}")
        return
    specs = [ClusterSpec(p) for p in paths]
    begin = time.perf_counter()
    plain = Replay(specs, policy="easy", first=first).run()
    peer_wall = time.perf_counter() - begin
    peer_rate = len(plain.jobs) / peer_wall
    print(f"plain 2-cluster replay (peer): {len(plain.jobs):,} jobs in {peer_wall:.2f} s = "
          f"{peer_rate:,.0f} jobs/s")
    workload = load_workload(specs, GridOptions(), first=first)
    for name in GRID_POLICIES:
        begin = time.perf_counter()
        run = run_policy(workload, name)
        wall = time.perf_counter() - begin
        jobs = len(run.busy_jobs())
        metrics = run.metrics()
        print(f"grid replay {name:>12}: {jobs:,} jobs in {wall:.2f} s = {jobs / wall:,.0f} jobs/s "
              f"(ratio to peer {jobs / wall / peer_rate:.2f}); utilization "
              f"{metrics['utilization']:.3f}, grid mean wait {metrics['grid']['mean_wait_s']:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--first", type=int, default=3000)
    args = parser.parse_args()
    for n in (3, 8):
        print(f"plan(): coallocated job over {n} busy Maui cores: {bench_plan(n):,.0f} plans/s")
    bench_replays(args.first)


if __name__ == "__main__":
    main()
