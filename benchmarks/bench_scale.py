"""Benchmark (issue 25, Scale): a thousand nodes and deep queues; a thin driver.

Runs the grid part (:mod:`scale_grid`: grids of 100, 300 and 1,000 harness-served
nodes over 10 RMs, SQLite and PostgreSQL: start time, Redis connections, idle CPU of
the shared services, N-job throughput and submit→ACTIVE p50/p95, with ratios to the
100-node grid), the deep-queue part (:mod:`scale_queue`: iteration first, warm and
unchanged, scheduler memory, the other RMs' throughput) and the operator commands at
depth (:mod:`bench_ops_depth`: ``showq`` and ``showstart`` at 10,000 to 100,000 jobs).

    python benchmarks/bench_scale.py                       # both parts, full size
    python benchmarks/bench_scale.py --quick               # fewer jobs, shorter windows
    python benchmarks/bench_scale.py --part grid --grid "--nodes 100,1000 --db sqlite"

``--grid ARGS`` / ``--queue ARGS`` / ``--ops ARGS`` pass their (shell-quoted) arguments to that part;
``--quick`` is passed to both.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _part(name: str) -> object | None:
    """The benchmark module ``name`` beside this file, or None when it is not there."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise
        return None


def _call(module: object, argv: list[str]) -> None:
    main = getattr(module, "main")
    if inspect.signature(main).parameters:
        main(argv)
    else:  # a part that reads sys.argv itself
        saved, sys.argv = sys.argv, [getattr(module, "__file__", "part"), *argv]
        try:
            main()
        finally:
            sys.argv = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["grid", "queue", "ops", "all"], default="all")
    parser.add_argument("--quick", action="store_true", help="both parts, small and short")
    parser.add_argument("--grid", default="", metavar="ARGS", help="arguments of scale_grid")
    parser.add_argument("--queue", default="", metavar="ARGS", help="arguments of scale_queue")
    parser.add_argument("--ops", default="", metavar="ARGS", help="arguments of bench_ops_depth")
    args = parser.parse_args()
    quick = ["--quick"] if args.quick else []
    if args.part in ("grid", "all"):
        print("== grid: harness-served nodes over 10 RMs ==", flush=True)
        _call(_part("scale_grid"), [*quick, *shlex.split(args.grid)])
    if args.part in ("queue", "all"):
        queue = _part("scale_queue")
        if queue is None:
            print("== queue: benchmarks/scale_queue.py not present; skipped ==")
        else:
            print("== queue: deep queues on one RM ==", flush=True)
            _call(queue, [*quick, *shlex.split(args.queue)])
    if args.part in ("ops", "all"):
        print("== ops: showq and showstart at depth ==", flush=True)
        ops = ["--sizes", "10000,50000"] if args.quick else []
        _call(_part("bench_ops_depth"), [*ops, *shlex.split(args.ops)])


if __name__ == "__main__":
    main()
