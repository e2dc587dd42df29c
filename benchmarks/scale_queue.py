"""Deep queues: one RM with 10,000 / 50,000 / 100,000 idle jobs, on SQLite and PostgreSQL.

Per depth and database, in a fresh process (so "first" is a scheduler worker's first
iteration): the live iteration of the deep RM (``run_iteration``, recovery included)
the first time, warm after a change (new jobs submitted, one cancelled), and with
nothing changed since the last; then, everything kept forgotten, a new scheduler
process's warm start (``scheduling.warm_start``: the RM's queue loaded before the
worker's first task) and its first iteration after it; the scheduler's memory per queued job (RSS growth of
the process over its iterations, divided by the depth); and the other RM's throughput
meanwhile: jobs/s of a loop that submits a job on rmB and runs rmB's iteration to start
it, alone, while rmA's iteration runs back to back in another thread of the same
process (a shared scheduler worker), the same with rmA resting after each iteration as
the shared workers' spacing policy has it while others wait, and while rmA runs back to
back in a process of its own (an RM marked ``scheduler = "own"``: ``grid-tasks worker
--iterations rmA``), alternating, in the same run; with rmA's iterations a second in
each case.  Wall times on a
shared machine only ever grow from noise, so CPU seconds of the iterating thread are
printed beside them; ratios are to the first depth's figures.

The idle jobs are inserted in bulk through SQL: rmA (demo topology, 8 processors) has
a running job on 6 of them (its leases alive) and idle jobs of 3-8 tasks, so the queue
is read and ranked every iteration and nothing starts.  PostgreSQL: a private database
``bench_queue_<pid>`` on 127.0.0.1:5432 (trust), dropped at the end.

    .venv/bin/python benchmarks/scale_queue.py [--depths 10000,50000,100000]
        [--backends sqlite,postgresql] [--seconds 6] [--peer-tree /path/to/old/checkout]

:func:`scale_queue` is what ``benchmarks/bench_scale.py`` calls.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
DEPTHS = (10_000, 50_000, 100_000)


#: The iterations timed, in the table's order, and their column labels.
KINDS = ("first", "started", "after_start", "warm", "unchanged")
LABELS = {"first": "first", "started": "start", "after_start": "after start",
          "warm": "warm (changed)", "unchanged": "unchanged"}


def scale_queue(depths: tuple[int, ...] = DEPTHS, backends: tuple[str, ...] = ("sqlite", "postgresql"),
                seconds: float = 6.0, out: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Measure every depth on every backend (each in a child process); print the table
    with ratios to the first depth; return the figures (one dict per run)."""
    runs: list[dict[str, Any]] = []
    out("deep queue on one RM (rmA); iteration CPU s (wall s); ratios to the first depth;")
    _header(out)
    for backend in backends:
        for depth in depths:  # each line as soon as it is measured (a run takes minutes)
            runs.append(_child(backend, depth, seconds))
            _line(runs[-1], next(r for r in runs if r["backend"] == backend), out)
    return runs


def _child(backend: str, depth: int, seconds: float, tree: Path = ROOT) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    script = tree / "benchmarks" / "scale_queue.py"
    done = subprocess.run([sys.executable, str(script), "--child", backend, str(depth),
                           str(seconds)], env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"scale_queue child ({backend}, {depth}) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _header(out: Callable[[str], None]) -> None:
    out("rmB jobs/s alone, then beside deep rmA: in the same worker / spaced in the same "
        "worker / in its own process (ratio to alone; rmA iterations/s)")
    out("start: a new scheduler process's warm start (its RMs' queues loaded before its "
        "first task); after: its first iteration then")
    out(f"{'db':<11}{'depth':>8}" + "".join(f"  {LABELS[k]:>15}" for k in KINDS)
        + f"  {'KB/job':>7}  {'alone':>6}  {'same worker':>22}  {'spaced':>22}"
        f"  {'own process':>22}")


def scale_queue_peer(depths: tuple[int, ...], backends: tuple[str, ...], seconds: float,
                     peer: Path, out: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Each depth and backend on this tree and on ``peer`` (another checkout, e.g. the
    code before a change), one after the other: this tree's line, the peer's, and the
    CPU ratios this/peer of the same run."""
    runs: list[dict[str, Any]] = []
    out(f"deep queue on one RM (rmA), this tree vs the peer {peer}; iteration CPU s (wall s)")
    _header(out)
    for backend in backends:
        for depth in depths:
            mine, theirs = _child(backend, depth, seconds), _child(backend, depth, seconds, peer)
            runs += [mine, theirs]
            _line(mine, mine, out)
            _line(theirs, theirs, lambda line: out(line + "   [peer]"))
            ratios = ", ".join(f"{k} x{mine[k]['cpu'] / max(theirs[k]['cpu'], 1e-9):.2f}"
                               for k in ("first", "warm", "unchanged"))
            out(f"{'':<19}this/peer CPU: {ratios}, KB/job "
                f"x{mine['kb_per_job'] / max(theirs['kb_per_job'], 1e-9):.2f}")
    return runs


def _line(r: dict[str, Any], b: dict[str, Any], out: Callable[[str], None]) -> None:
    """One run's figures, and its ratios to ``b`` (the backend's first depth)."""
    cells = [f"{r[k]['cpu']:.3f} ({r[k]['wall']:.2f})" if k in r else "-" for k in KINDS]
    thr = r["throughput"]
    out(f"{r['backend']:<11}{r['depth']:>8,}" + "".join(f"  {c:>15}" for c in cells)
        + f"  {r['kb_per_job']:>7.2f}  {thr['alone']:>6.1f}" + "".join(
            f"  {thr[k]:>6.1f} ({thr[k] / thr['alone']:.2f}x; {thr['deep_per_s'][k]:>5.2f}/s)"
            for k in ("with_deep", "spaced", "own_process")))
    if r is not b:
        ratios = ", ".join(f"{k} x{r[k]['cpu'] / max(b[k]['cpu'], 1e-9):.2f}"
                           for k in KINDS if k in r and k in b)
        out(f"{'':<11}{'':>8}  CPU vs {b['depth']:,}: {ratios}, KB/job "
            f"x{r['kb_per_job'] / max(b['kb_per_job'], 1e-9):.2f} (depth x{r['depth'] / b['depth']:.0f})")


# --- the child: one backend, one depth ------------------------------------------------

def _measure(backend: str, depth: int, seconds: float) -> dict[str, Any]:
    import tempfile

    from scale_queue_env import QueueBench

    with tempfile.TemporaryDirectory() as tmp:
        with QueueBench(Path(tmp), backend) as bench:
            bench.fill(depth)
            rss0 = bench.rss()
            first = bench.iterate_deep()
            unchanged = [bench.iterate_deep() for _ in range(5)]
            warm = []
            for _ in range(3):
                bench.change()
                warm.append(bench.iterate_deep())
            unchanged += [bench.iterate_deep() for _ in range(3)]
            rss1 = bench.rss()
            started = bench.restart()  # a new process's warm start, then its first
            after_start = bench.iterate_deep()
            throughput = bench.throughput(seconds)
    return {"backend": backend, "depth": depth, "first": first,
            "warm": _median(warm), "unchanged": _median(unchanged), "started": started,
            "after_start": after_start,
            "kb_per_job": max(0, rss1 - rss0) / depth / 1024, "throughput": throughput}


def _median(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in ("cpu", "wall")}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        backend, depth, seconds = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
        print(json.dumps(_measure(backend, depth, seconds)))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", default=",".join(map(str, DEPTHS)))
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--seconds", type=float, default=6.0,
                        help="length of each throughput measurement")
    parser.add_argument("--quick", action="store_true",
                        help="10,000 and 50,000 jobs on SQLite, 3 s measurements")
    parser.add_argument("--peer-tree", type=Path,
                        help="also run each measurement on this checkout (the old code), "
                             "printing this tree's CPU figures over the peer's")
    args = parser.parse_args()
    if args.quick:
        args.depths, args.backends, args.seconds = "10000,50000", "sqlite", 3.0
    if args.peer_tree is not None:
        scale_queue_peer(tuple(int(d) for d in args.depths.split(",")),
                         tuple(args.backends.split(",")), args.seconds, args.peer_tree,
                         out=lambda line: print(line, flush=True))
        return
    scale_queue(tuple(int(d) for d in args.depths.split(",")), tuple(args.backends.split(",")),
                args.seconds, out=lambda line: print(line, flush=True))


if __name__ == "__main__":
    sys.exit(main())
