"""Benchmark: `grid-tasks up` until every node is registered, and how start-up grows.

(a) The demo grid through the real command (target < 5 s): timed from spawn until it
    prints the grid table (which it does only once every node daemon has heartbeated),
    then stopped with SIGTERM, the shutdown timed too.
(b) Start-up against the number of nodes: an :class:`EmbeddedStack` (what `up` runs)
    on generated grids of e.g. 4, 16 and 64 nodes (16 nodes per RM), each phase timed
    through the progress callback.  The peer is the smallest grid of the same run:
    printed are each grid's time and its ratio to the peer's, beside the ratio of node
    counts (linear growth: the time ratio stays at or below the node ratio), and the
    marginal cost of a node between consecutive sizes (linear: flat, not growing).

    .venv/bin/python benchmarks/bench_up.py [--runs 3] [--nodes 4,16,64] [--skip-demo]
"""

from __future__ import annotations

import argparse
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grid_tasks.embedded.stack import EmbeddedStack, StackOptions  # noqa: E402
from grid_tasks.embedded.stack import grid_tasks_command  # noqa: E402

TARGET_S = 5.0
NODES_PER_RM = 16


def one_run(state_dir: Path) -> tuple[float, float]:
    started = time.monotonic()
    proc = subprocess.Popen([*grid_tasks_command("up", "--state-dir", str(state_dir),
                                                 "--topology", str(REPO / "config" /
                                                                   "demo-grid.toml"))],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    up = None
    try:
        for line in proc.stdout:
            if "grid up in" in line:
                up = time.monotonic() - started
            if "Ctrl-C stops the grid" in line:
                break
        if up is None:
            raise SystemExit(f"grid-tasks up failed:\n{proc.communicate()[0]}")
        stop_started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
        return up, time.monotonic() - stop_started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def demo(runs: int) -> None:
    ups, downs = [], []
    for i in range(runs):
        with tempfile.TemporaryDirectory(prefix="bench-up-") as tmp:
            up, down = one_run(Path(tmp))
        ups.append(up)
        downs.append(down)
        print(f"run {i + 1}: up (all 4 nodes registered) {up:.2f} s, stop {down:.2f} s")
    med = statistics.median(ups)
    print(f"grid-tasks up -> all demo nodes registered: median {med:.2f} s "
          f"(min {min(ups):.2f}, max {max(ups):.2f}) over {runs} runs; "
          f"target < {TARGET_S:.0f} s: {'MET' if med < TARGET_S else 'MISSED'}")
    print(f"shutdown (SIGTERM -> every process gone): median {statistics.median(downs):.2f} s")


def grid_topology(nodes: int, path: Path) -> Path:
    """``nodes`` two-processor nodes, :data:`NODES_PER_RM` per RM (at least one RM)."""
    policy = REPO / "config" / "demo.cfg"
    parts = []
    for index in range(nodes):
        rm = f"rm{index // NODES_PER_RM}"
        if index % NODES_PER_RM == 0:
            parts.append(f'[rm.{rm}]\npolicy_file = "{policy}"\n')
        parts.append(f"[rm.{rm}.node.n{index}]\nprocs = 2\nmemory_mb = 2048\n")
    path.write_text("\n".join(parts))
    return path


def timed_start(nodes: int) -> dict[str, float]:
    """Start a stack of ``nodes`` nodes; seconds per phase and in all (then stop it)."""
    with tempfile.TemporaryDirectory(prefix="bench-up-scale-") as tmp:
        topology = grid_topology(nodes, Path(tmp) / "grid.toml")
        stack = EmbeddedStack(StackOptions(topology_file=topology, state_dir=Path(tmp) / "s",
                                           start_timeout=600, loglevel="WARNING",
                                           announce=False))
        marks: list[tuple[str, float]] = []
        started = time.monotonic()
        try:
            stack.start(progress=lambda phase: marks.append((phase, time.monotonic())))
            total = time.monotonic() - started
        finally:
            stack.stop()
    phases = {}
    for (phase, at), (_, after) in zip(marks, [*marks[1:], ("end", started + total)]):
        phases[phase] = after - at
    phases["total"] = total
    return phases


def scale(sizes: list[int]) -> None:
    results = {}
    for nodes in sizes:
        results[nodes] = timed_start(nodes)
        phases = ", ".join(f"{name} {secs:.2f}" for name, secs in results[nodes].items()
                           if name != "total")
        print(f"{nodes:4d} nodes: up in {results[nodes]['total']:6.2f} s  ({phases})")
    peer = sizes[0]
    base = results[peer]["total"]
    print(f"start-up against nodes (peer: the {peer}-node grid of this run, {base:.2f} s):")
    previous = None
    for nodes in sizes:
        total = results[nodes]["total"]
        line = (f"  {nodes:4d} nodes: {total:6.2f} s, {1000 * total / nodes:6.0f} ms/node; "
                f"time x{total / base:5.2f} for nodes x{nodes / peer:5.2f}")
        if previous is not None:
            prev_nodes, prev_total = previous
            line += (f"; marginal {1000 * (total - prev_total) / (nodes - prev_nodes):5.0f} "
                     f"ms per node from {prev_nodes}")
        print(line)
        previous = (nodes, total)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of (a), the demo grid")
    parser.add_argument("--nodes", default="4,16,64",
                        help="grid sizes of (b), comma-separated, smallest (the peer) first")
    parser.add_argument("--skip-demo", action="store_true", help="only (b)")
    args = parser.parse_args()
    if not args.skip_demo:
        demo(args.runs)
    sizes = sorted(int(n) for n in args.nodes.split(",") if n.strip())
    if sizes:
        scale(sizes)


if __name__ == "__main__":
    main()
