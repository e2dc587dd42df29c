"""Benchmark: what an idle node daemon costs - lean settings against Celery's defaults.

Starts two groups of real ``grid-tasks worker --rm rmA --node nodeK`` node daemons side
by side, each group on its own private redis-server (so each server's command
counters are its group's alone): ``old`` with ``GRID_TASKS_LEAN_NODES=0`` (Celery's
defaults, what every node ran before issue 25) and ``new`` with the lean settings of
:mod:`grid_tasks.node.worker_config`.  ``--old-tree DIR`` runs the old group from another
checkout instead (e.g. ``git worktree add /tmp/main main``): its code as well as its
settings (the watchdog's idle beats, the heartbeat's MULTI), not only the settings.
Once all are registered and settled it measures, over the same window (so both groups
see the same machine load):

* Redis connections per daemon (``CLIENT LIST`` entries whose client port is one of
  the daemon's sockets);
* idle CPU per daemon: on-CPU time of its threads from ``/proc/<pid>/task/*/schedstat``
  (nanoseconds; ``/proc/<pid>/stat`` counts 10 ms ticks, too coarse for 0.02% of a
  core), and separately of its watchdog process;
* Redis commands per second per daemon (``INFO commandstats`` delta of its server).

Prints each figure and the ratio new/old.  Targets: <= 3 connections, CPU <= 0.1x.

    .venv/bin/python benchmarks/bench_idle.py [--nodes 8] [--window 30] [--interval 5]
                                              [--old-tree DIR]
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import psutil
import redis

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grid_tasks.embedded.redis_server import RedisServer  # noqa: E402
from grid_tasks.embedded.stack import grid_tasks_command  # noqa: E402
from grid_tasks.embedded.supervisor import Supervisor, leftover  # noqa: E402
from grid_tasks.node.registry import NodeRegistry  # noqa: E402
from grid_tasks.settings import Settings, default_ttl  # noqa: E402

NODE = """
[rm.rmA.node.node{k}]
procs = 2
memory_mb = 2048
disk_mb = 10000
swap_mb = 512
"""


def topology(folder: Path, nodes: int) -> Path:
    """A one-RM topology of ``nodes`` nodes (node1..nodeN) with the demo policy."""
    shutil.copy(REPO / "config" / "demo.cfg", folder / "demo.cfg")
    path = folder / "grid.toml"
    path.write_text('[rm.rmA]\npolicy_file = "demo.cfg"\n'
                    + "".join(NODE.format(k=k) for k in range(1, nodes + 1)))
    return path


class Group:
    """One group of node daemons on its own redis-server."""

    def __init__(self, name: str, lean: bool, folder: Path, server: RedisServer,
                 topo: Path, interval: float, tree: Path | None = None) -> None:
        self.name, self.server, self.tree = name, server, tree
        state = folder / "state"
        state.mkdir(parents=True)
        self.settings = Settings(
            broker_url=server.url(1), result_backend=server.url(2), redis_url=server.url(3),
            state_dir=state, topology_file=topo, heartbeat_interval=interval,
            heartbeat_ttl=default_ttl(interval), single_user=True, lean_nodes=lean)
        self.supervisor = Supervisor(folder / "logs")
        self.admin = redis.Redis.from_url(server.url(0))
        self.children: list = []

    def start(self, nodes: int) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GRID_TASKS_")}
        env.update(self.settings.to_env())
        env.pop("GRID_TASKS_DATABASE_URL")  # nodes hold no database credentials
        if self.tree is not None:
            env["PYTHONPATH"] = str(self.tree)  # that checkout's grid_tasks wins,
            env["PYTHONSAFEPATH"] = "1"  # not the one in the working directory (`python -c`)
        for k in range(1, nodes + 1):
            self.children.append(self.supervisor.spawn(f"node{k}", grid_tasks_command(
                "worker", "--rm", "rmA", "--node", f"node{k}", "--no-check", "-l", "WARNING"),
                env=env))

    def wait(self, nodes: int, timeout: float) -> None:
        registry = NodeRegistry.from_url(self.settings.redis_url, self.settings.heartbeat_ttl)
        registry.wait_alive([("rmA", f"node{k}") for k in range(1, nodes + 1)], timeout)

    def connections(self) -> list[int]:
        """Redis connections of each daemon (matched by its sockets' local ports)."""
        clients = self.admin.client_list()
        counts = []
        for child in self.children:
            ports = {c.laddr.port for c in psutil.Process(child.pid).net_connections("tcp")
                     if c.raddr and c.raddr.port == self.server.port}
            counts.append(sum(1 for c in clients if int(c["addr"].rsplit(":", 1)[1]) in ports))
        return counts

    def cpu_ns(self) -> tuple[int, int]:
        """On-CPU nanoseconds so far: the daemons' threads, their watchdogs."""
        daemons = watchdogs = 0
        for child in self.children:
            daemons += _threads_ns(child.pid)
            for sub in psutil.Process(child.pid).children(recursive=True):
                watchdogs += _threads_ns(sub.pid)
        return daemons, watchdogs

    def commands(self) -> dict[str, int]:
        """Calls so far per command, less this benchmark's own INFO/CLIENT calls."""
        stats = self.admin.info("commandstats")
        return {k.removeprefix("cmdstat_"): v["calls"] for k, v in stats.items()
                if not k.startswith(("cmdstat_info", "cmdstat_client"))}

    def stop(self) -> None:
        pids = self.supervisor.all_pids()
        self.supervisor.stop_all(timeout=15)
        self.admin.close()
        if leftover(pids):
            print(f"warning: {self.name} processes survived: {leftover(pids)}")


def _threads_ns(pid: int) -> int:
    total = 0
    for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            with open(path) as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that just ended
    return total


def measure(groups: list[Group], nodes: int, window: float) -> dict[str, dict[str, float]]:
    before = {g.name: (g.cpu_ns(), g.commands()) for g in groups}
    start = time.monotonic()
    time.sleep(window)
    wall = time.monotonic() - start
    out: dict[str, dict[str, float]] = {}
    for g in groups:
        (d0, w0), c0 = before[g.name]
        d1, w1 = g.cpu_ns()
        c1 = g.commands()
        delta = {k: c1[k] - c0.get(k, 0) for k in c1 if c1[k] - c0.get(k, 0)}
        conns = g.connections()
        out[g.name] = {
            "connections": max(conns), "connections_mean": sum(conns) / len(conns),
            "cpu_pct": (d1 - d0) / 1e9 / wall / nodes * 100,
            "watchdog_pct": (w1 - w0) / 1e9 / wall / nodes * 100,
            "cmds_per_s": sum(delta.values()) / wall / nodes,
        }
        top = sorted(delta.items(), key=lambda kv: -kv[1])[:8]
        print(f"  {g.name} commands/s per daemon: "
              + ", ".join(f"{k} {v / wall / nodes:.2f}" for k, v in top))
    return out


def report(res: dict[str, dict[str, float]]) -> None:
    old, new = res["old"], res["new"]
    rows = (("Redis connections per daemon (max)", "connections", "{:.0f}"),
            ("Redis connections per daemon (mean)", "connections_mean", "{:.2f}"),
            ("idle CPU per daemon, % of a core", "cpu_pct", "{:.4f}"),
            ("idle CPU per watchdog, % of a core", "watchdog_pct", "{:.4f}"),
            ("Redis commands/s per daemon", "cmds_per_s", "{:.3f}"))
    print(f"\n  {'':<38}{'old':>10}{'new':>10}{'new/old':>10}")
    for label, key, fmt in rows:
        ratio = new[key] / old[key] if old[key] else float("nan")
        print(f"  {label:<38}{fmt.format(old[key]):>10}{fmt.format(new[key]):>10}"
              f"{ratio:>9.3f}x")
    both_old = old["cpu_pct"] + old["watchdog_pct"]
    both_new = new["cpu_pct"] + new["watchdog_pct"]
    print(f"  {'idle CPU, daemon + watchdog':<38}{both_old:>10.4f}{both_new:>10.4f}"
          f"{both_new / both_old:>9.3f}x")
    print(f"\n  targets: <= 3 connections ({'met' if new['connections'] <= 3 else 'MISSED'}),"
          f" daemon CPU <= 0.1x ({'met' if new['cpu_pct'] <= 0.1 * old['cpu_pct'] else 'MISSED'})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=8, help="daemons per group")
    parser.add_argument("--window", type=float, default=30.0, help="idle window, s")
    parser.add_argument("--settle", type=float, default=10.0,
                        help="seconds after registration before measuring")
    parser.add_argument("--interval", type=float, default=5.0,
                        help="node heartbeat interval, s (the grid's default: 5)")
    parser.add_argument("--old-tree", type=Path, default=None,
                        help="checkout whose code the old group runs (default: this one "
                             "with GRID_TASKS_LEAN_NODES=0)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-idle-") as tmp, ExitStack() as stack:
        root = Path(tmp)
        topo = topology(root, args.nodes)
        groups = []
        for name, lean in (("old", False), ("new", True)):
            server = stack.enter_context(RedisServer(root / name / "redis"))
            tree = args.old_tree.resolve() if args.old_tree and not lean else None
            group = Group(name, lean, root / name, server, topo, args.interval, tree)
            stack.callback(group.stop)
            groups.append(group)
        print(f"bench_idle: {args.nodes} node daemons per group, heartbeat "
              f"{args.interval:g} s, window {args.window:g} s, {psutil.cpu_count()} cores; "
              f"old = {args.old_tree or 'this tree, GRID_TASKS_LEAN_NODES=0'}")
        began = time.monotonic()
        for g in groups:
            g.start(args.nodes)
        for g in groups:
            g.wait(args.nodes, timeout=120 + 10 * args.nodes)
        print(f"  all {2 * args.nodes} registered in {time.monotonic() - began:.1f} s; "
              f"settling {args.settle:g} s")
        time.sleep(args.settle)
        report(measure(groups, args.nodes, args.window))


if __name__ == "__main__":
    main()
