"""Load test: C client processes submit N /bin/true jobs each through the embedded demo grid.

    .venv/bin/python benchmarks/bench_load.py                 # 8 clients x 1250 = 10,000 jobs
    .venv/bin/python benchmarks/bench_load.py --clients 8 --jobs 100

Prints the submit rate, the completion time and jobs/s, and the accounting verdict
(every job terminal, one accounting record per job, no duplicate).  Exit 1 if any
job is unaccounted for.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from grid_tasks.embedded.stack import EmbeddedStack, StackOptions
from grid_tasks.faults.load import run_load


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=1250, help="jobs per client")
    parser.add_argument("--timeout", type=float, default=7200.0)
    args = parser.parse_args()
    state = Path(tempfile.mkdtemp(prefix="bench-load-"))
    t0 = time.monotonic()
    with EmbeddedStack(StackOptions(state_dir=state, loglevel="WARNING")) as stack:
        print(f"embedded grid up in {time.monotonic() - t0:.1f} s ({state})", flush=True)
        last = [0.0]

        def progress(done: int, total: int) -> None:
            if time.monotonic() - last[0] > 10:
                last[0] = time.monotonic()
                print(f"  {done}/{total} jobs ended", flush=True)

        result = run_load(stack.settings, args.clients, args.jobs, rms=["rmA", "rmB"],
                          timeout=args.timeout, progress=progress)
    print(f"jobs                 {result.jobs} from {result.clients} client processes")
    print(f"submit               {result.submit_s:.1f} s  ({result.submit_rate:.1f} jobs/s)")
    print(f"all terminal after   {result.complete_s:.1f} s  ({result.throughput:.1f} jobs/s)")
    print(f"done / failed        {result.done} / {result.failed}")
    print(f"accounting records   {result.accounted}  duplicates {result.duplicate_ids}  "
          f"missing {result.missing_accounting}")
    print("ALL ACCOUNTED FOR" if result.ok else "JOBS UNACCOUNTED FOR")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
