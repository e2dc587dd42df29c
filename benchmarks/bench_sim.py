"""Whole-trace replays of SDSC-SP2, CTC-SP2 and KTH-SP2: speed, memory, fidelity.

    .venv/bin/python benchmarks/bench_sim.py                 # every trace and policy
    .venv/bin/python benchmarks/bench_sim.py --policies easy # the issue's headline runs
    .venv/bin/python benchmarks/bench_sim.py --profile CTC-SP2:conservative
    .venv/bin/python benchmarks/bench_sim.py --policies easy \
        --configs config/maui.cfg,config/maui-site.cfg      # site files beside EASY
    .venv/bin/python benchmarks/bench_sim.py --traces KTH-SP2 --first 5000 ...  # a subset

Each (trace, policy) replay runs in a fresh child process so that its peak
resident memory (``ru_maxrss``) is its own.  Printed per run: wall time (reading
the gzipped trace included), jobs per second, events per second, peak memory,
the speed-up over the reference simulator's EASY times measured on a machine
like this one (15 s, 105 s, 17 s) and the deviation of mean wait / bsld from the
reference table; the header says which conservative and site cores ran (``GRID_TASKS_PURE=1``
forces the pure-Python one).  ``--profile`` prints the cProfile hot spots of one replay.

``--configs`` replays maui.cfg files on the same traces; each is printed beside the
EASY replay of its trace with the ratio of their CPU times (issue 22's target: a
site's configuration within 3x of EASY, conservative within 2x).  A configuration
whose throttles never let some jobs start says how many stayed unfinished.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORKLOADS = ROOT / ".." / "shared" / "workloads"
TRACES = {
    "SDSC-SP2": ("SDSC-SP2-1998-4.2-cln.swf.gz", 128, 15.0),
    "CTC-SP2": ("CTC-SP2-1996-3.1-cln.swf.gz", 338, 105.0),
    "KTH-SP2": ("KTH-SP2-1996-2.1-cln.swf.gz", 100, 17.0),
}
POLICIES = ("easy", "fcfs", "conservative")
# The README's whole-trace reference figures: (mean wait s, mean bsld) per policy.
REFERENCE = {
    "SDSC-SP2": {"fcfs": (1_536_411.9, 13_985.1), "easy": (20_637.3, 88.537),
                 "conservative": (21_641.7, 93.445)},
    "CTC-SP2": {"fcfs": (655_548.4, 3_655.5), "easy": (13_758.1, 47.934),
                "conservative": (17_589.1, 54.026)},
    "KTH-SP2": {"fcfs": (354_176.0, 6_821.9), "easy": (6_899.7, 92.736),
                "conservative": (7_297.6, 88.180)},
}


def conservative_core() -> str:
    """Which core the conservative replays run on (``compiled`` unless the extension
    is missing or GRID_TASKS_PURE=1 forces the pure-Python reference)."""
    from grid_tasks.maui.pool_compiled import CORE

    return CORE


def site_core() -> str:
    """Which core a site's maui.cfg replays on (``compiled``, else ``pure``: the lean pass)."""
    from grid_tasks.maui.pool_site import CORE

    return CORE


def is_config(policy: str) -> bool:
    return policy not in POLICIES


def replay_once(trace: str, policy: str, first: int | None = None) -> dict:
    """One replay with pyss conventions, timed (run in a child process); ``policy`` is
    a preset or a maui.cfg path."""
    from grid_tasks.sim.replay import ClusterSpec, Replay

    name, procs, _ = TRACES[trace]
    spec = {"policy": None, "config": policy} if is_config(policy) else {"policy": policy}
    begin, cpu = time.perf_counter(), time.process_time()
    result = Replay([ClusterSpec(WORKLOADS / name, procs)], conventions="pyss", first=first,
                    **spec).run()
    wall, cpu = time.perf_counter() - begin, time.process_time() - cpu
    summary = result.summary
    assert summary is not None
    return {"trace": trace, "policy": policy, "wall_s": wall, "cpu_s": cpu, "jobs": len(result.jobs),
            "unfinished": result.unfinished, "first": first,
            "events": result.events, "mean_wait_s": summary.mean_wait_s,
            "mean_bsld": summary.mean_bsld, "utilization": summary.utilization,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_child(trace: str, policy: str, timeout: float, first: int | None = None) -> dict | None:
    cmd = [sys.executable, __file__, "--child", f"{trace}:{policy}"]
    if first:
        cmd += ["--first", str(first)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True)
    except subprocess.TimeoutExpired:
        return None
    except subprocess.CalledProcessError as exc:
        sys.exit(f"replay {trace}/{policy} failed:\n{exc.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(row: dict, easy: dict | None = None) -> str:
    trace, policy = row["trace"], row["policy"]
    label = Path(policy).name if is_config(policy) else policy
    text = (f"{trace:9} {label:16} {row['wall_s']:8.2f} s (CPU {row['cpu_s']:7.2f} s) "
            f"{row['jobs'] / row['wall_s']:9,.0f} jobs/s {row['events'] / row['wall_s']:9,.0f} events/s "
            f"{row['peak_rss_mb']:6.1f} MB")
    reference = REFERENCE[trace].get(policy) if not row.get("first") else None
    if reference is not None:
        ref_wait, ref_bsld = reference
        text += (f"  wait {100 * (row['mean_wait_s'] / ref_wait - 1):+.3f}%  "
                 f"bsld {100 * (row['mean_bsld'] / ref_bsld - 1):+.3f}%")
    if policy == "easy" and not row.get("first"):
        ref_s = TRACES[trace][2]
        text += f"  reference {ref_s:.0f} s -> {ref_s / row['wall_s']:.1f}x faster"
    if easy is not None and policy != "easy":
        text += f"  CPU {row['cpu_s'] / easy['cpu_s']:.2f}x EASY's"
    if row.get("unfinished"):
        text += f"  ({row['unfinished']:,} never started)"
    return text


def profile(target: str, top: int) -> None:
    trace, policy = target.split(":", 1)
    profiler = cProfile.Profile()
    profiler.enable()
    row = replay_once(trace, policy)
    profiler.disable()
    print(f"{trace} {policy}: {row['wall_s']:.2f} s under the profiler")
    stats = pstats.Stats(profiler).strip_dirs()
    stats.sort_stats("tottime").print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", default=",".join(TRACES), help="comma-separated trace names")
    parser.add_argument("--policies", default=",".join(POLICIES), help="comma-separated policies")
    parser.add_argument("--configs", default="", help="comma-separated maui.cfg files replayed beside EASY")
    parser.add_argument("--first", type=int, help="replay only the first N job lines (no reference)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per replay")
    parser.add_argument("--profile", metavar="TRACE:POLICY", help="profile one replay instead")
    parser.add_argument("--top", type=int, default=20, help="hot spots shown by --profile")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(replay_once(*args.child.split(":", 1), first=args.first)))
        return
    missing = [n for n, (f, _, _) in TRACES.items() if not (WORKLOADS / f).exists()]
    if missing:
        sys.exit(f"shared workloads not found beside the checkout ({WORKLOADS}): {missing}")
    if args.profile:
        profile(args.profile, args.top)
        return
    configs = [str(Path(c).resolve()) for c in args.configs.split(",") if c]
    policies = [p for p in args.policies.split(",") if p]
    if configs and "easy" not in policies:
        policies.insert(0, "easy")  # the peer every configuration is measured against
    subset = f"first {args.first:,} jobs" if args.first else "whole traces"
    print(f"replays ({subset}), pyss conventions (wall time includes reading the trace); "
          f"conservative core: {conservative_core()}, site core: {site_core()}")
    worst_ratio, peak, worst_cfg = float("inf"), 0.0, 0.0
    for trace in args.traces.split(","):
        easy = None
        walls: dict[str, float] = {}
        for policy in policies + configs:
            row = run_child(trace, policy, args.timeout, args.first)
            if row is None:
                print(f"{trace:9} {policy:16} timed out after {args.timeout:.0f} s")
                continue
            easy = row if policy == "easy" else easy
            print(report(row, easy), flush=True)
            walls[Path(policy).name if is_config(policy) else policy] = row["wall_s"]
            peak = max(peak, row["peak_rss_mb"])
            if policy == "easy" and not args.first:
                worst_ratio = min(worst_ratio, TRACES[trace][2] / row["wall_s"])
            if is_config(policy) and easy is not None:
                worst_cfg = max(worst_cfg, row["cpu_s"] / easy["cpu_s"])
        if "easy" in walls:
            print("".join(f"{trace:9} {p:16} {w / walls['easy']:8.2f}x the EASY replay's time\n"
                          for p, w in walls.items() if p != "easy"), end="")
    if worst_ratio != float("inf"):
        print(f"EASY: slowest speed-up over the reference {worst_ratio:.1f}x (target >= 10x)")
    if configs:
        print(f"configurations: slowest CPU {worst_cfg:.2f}x EASY's on the same trace (target <= 3x)")
    print(f"largest peak memory {peak:.1f} MB (target < 1024 MB)")


if __name__ == "__main__":
    main()
