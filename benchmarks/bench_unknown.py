"""Benchmark: kill a node daemon -> its node shows Unknown (target <= 2 heartbeat intervals).

Starts a private redis-server and a real `grid-tasks worker --rm rmA --node node1`
node daemon, SIGKILLs it at a random point of its heartbeat cycle, and polls
the registry (as `grid-tasks nodes` reads it) until the node is Unknown.

    .venv/bin/python benchmarks/bench_unknown.py [--runs 5] [--interval 1.0]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grid_tasks.embedded.redis_server import RedisServer  # noqa: E402
from grid_tasks.embedded.stack import grid_tasks_command  # noqa: E402
from grid_tasks.embedded.supervisor import Supervisor  # noqa: E402
from grid_tasks.node.registry import NodeRegistry  # noqa: E402
from grid_tasks.settings import Settings, default_ttl  # noqa: E402
from grid_tasks.states import NodeState  # noqa: E402


def one_run(settings: Settings, supervisor: Supervisor, registry: NodeRegistry,
            rng: random.Random) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRID_TASKS_")}
    env.update(settings.to_env())
    child = supervisor.spawn("node1", grid_tasks_command(
        "worker", "--rm", "rmA", "--node", "node1", "--no-check", "-l", "WARNING"), env=env)
    registry.wait_alive([("rmA", "node1")], timeout=30)
    time.sleep(rng.uniform(1, 2) * settings.heartbeat_interval)  # random heartbeat phase
    child.process.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    child.process.wait()
    while registry.status("rmA", "node1").state is not NodeState.UNKNOWN:
        time.sleep(0.005)
    elapsed = time.monotonic() - killed
    supervisor.stop_all()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--interval", type=float, default=1.0, help="heartbeat interval, s")
    args = parser.parse_args()
    rng = random.Random(42)
    with tempfile.TemporaryDirectory(prefix="bench-unknown-") as tmp, \
            RedisServer(Path(tmp) / "redis") as server:
        settings = Settings(
            broker_url=server.url(1), result_backend=server.url(2), redis_url=server.url(3),
            database_url=f"sqlite:///{tmp}/grid.db", state_dir=Path(tmp),
            topology_file=REPO / "config" / "demo-grid.toml",
            heartbeat_interval=args.interval, heartbeat_ttl=default_ttl(args.interval))
        registry = NodeRegistry.from_url(settings.redis_url, settings.heartbeat_ttl)
        supervisor = Supervisor(Path(tmp) / "logs")
        try:
            times = []
            for i in range(args.runs):
                t = one_run(settings, supervisor, registry, rng)
                times.append(t)
                print(f"run {i + 1}: Unknown {t:.3f} s after SIGKILL "
                      f"({t / args.interval:.2f} heartbeat intervals)")
        finally:
            supervisor.stop_all()
    worst = max(times) / args.interval
    print(f"kill -> Unknown: median {statistics.median(times):.3f} s, max {max(times):.3f} s "
          f"= {worst:.2f} heartbeat intervals of {args.interval:g} s (TTL {default_ttl(args.interval):g} s)"
          f"; target <= 2 intervals: {'MET' if worst <= 2.0 else 'MISSED'}")


if __name__ == "__main__":
    main()
