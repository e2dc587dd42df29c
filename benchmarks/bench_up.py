"""Benchmark: `grid-tasks up` until every demo node is registered (target < 5 s).

Runs the real command in a subprocess, timing from spawn until it prints the
grid table (which it does only once every node daemon has heartbeated), then
stops it with SIGTERM and times the shutdown too.

    .venv/bin/python benchmarks/bench_up.py [--runs 3]
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

from grid_tasks.embedded.stack import grid_tasks_command  # noqa: E402

TARGET_S = 5.0


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    ups, downs = [], []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="bench-up-") as tmp:
            up, down = one_run(Path(tmp))
        ups.append(up)
        downs.append(down)
        print(f"run {i + 1}: up (all 4 nodes registered) {up:.2f} s, stop {down:.2f} s")
    med = statistics.median(ups)
    print(f"grid-tasks up -> all demo nodes registered: median {med:.2f} s "
          f"(min {min(ups):.2f}, max {max(ups):.2f}) over {args.runs} runs; "
          f"target < {TARGET_S:.0f} s: {'MET' if med < TARGET_S else 'MISSED'}")
    print(f"shutdown (SIGTERM -> every process gone): median {statistics.median(downs):.2f} s")


if __name__ == "__main__":
    main()
