"""Co-reservation of a 3-RM job, end to end, on an embedded 3-RM grid, in one run.

The grid (written to a temporary topology: rmA, rmB, rmC, two nodes each) runs the
embedded stack: scheduler workers (where the RMs' estimate/reserve tasks run), beats,
node daemons.  Measured, one at a time after a warm-up:

(a) bare Celery round trips: a no-op task on the scheduler queue, sent and awaited;
(b) co-reservations of a 3-component job (one component fixed to rmA, two placed by
    the broker through MIL ``requirements``): from the request text to the confirmed
    co-reservation: lowering, live collection, placement, one parallel batch of
    estimates, planning, tokens for the whole schedule (one script), one parallel batch
    of ``reserve`` on the three RMs, token confirmation.  Each is released afterwards
    (not timed), so every run sees the same free grid.

Printed: p50/p95 of both and their ratio (how many bare round trips one co-reservation
costs; it needs at least two sequential batches of RM calls).

    .venv/bin/python benchmarks/bench_coreserve.py [--runs 30]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

TOPOLOGY = """
[rm.{rm}]
policy_file = "{policy}"
site = "{site}"

[rm.{rm}.node.{rm}n1]
procs = 4
memory_mb = 4096

[rm.{rm}.node.{rm}n2]
procs = 4
memory_mb = 4096
"""

JOB = ("+(&(executable=/bin/true)(resourceManagerContact=rmA)(count=2)(label=a)(maxWallTime=5))"
       "(&(executable=/bin/true)(count=4)(label=b)(maxWallTime=5)"
       "(requirements='$site == \"south\"'))"
       "(&(executable=/bin/true)(count=3)(label=c)(maxWallTime=5)"
       "(requirements='$site == \"east\"'))")


#: seconds per call of each phase of a co-reservation (after the warm-up)
PHASES: dict[str, list[float]] = {}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def write_topology(directory: Path) -> Path:
    from grid_tasks.settings import default_config_file

    policy = default_config_file("maui.cfg").resolve()
    text = "".join(TOPOLOGY.format(rm=rm, site=site, policy=policy)
                   for rm, site in (("rmA", "north"), ("rmB", "south"), ("rmC", "east")))
    path = directory / "grid3.toml"
    path.write_text(text)
    return path


def bare_round_trips(app, n: int) -> list[float]:
    from grid_tasks.scheduling.tasks import PING

    times = []
    for i in range(n + 3):
        t0 = time.perf_counter()
        app.send_task(PING).get(timeout=60)
        if i >= 3:
            times.append(time.perf_counter() - t0)
    return times


def timed(phases: dict[str, list[float]], obj, name: str, key: str) -> None:
    """Wrap ``obj.name`` to record how long each call takes under ``phases[key]``."""
    inner = getattr(obj, name)

    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            phases.setdefault(key, []).append(time.perf_counter() - t0)

    setattr(obj, name, wrapper)


def coreservations(broker, n: int) -> tuple[list[float], list[int]]:
    from grid_tasks.legion.collection import Requester

    me = Requester.current()
    times, tries = [], []
    for i in range(n + 2):
        if i == 2:
            PHASES.clear()
        t0 = time.perf_counter()
        co = broker.coreserve(broker.components(JOB, me), now=time.time(), requester=me)
        elapsed = time.perf_counter() - t0
        if co.rms != ("rmA", "rmB", "rmC") or len({p.start for p in co.parts}) != 1:
            raise SystemExit(f"unexpected co-reservation {co.to_dict()}")
        if broker.release(co) != 3:
            raise SystemExit(f"co-reservation {co.job_key} not released on every RM")
        if i >= 2:  # the first two warm up connections and the workers' imports
            times.append(elapsed)
            tries.append(len(co.attempts))
    return times, tries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="co-reservations (and round trips)")
    args = parser.parse_args()

    from grid_tasks.broker.live import Broker
    from grid_tasks.celery_app import create_app
    from grid_tasks.embedded.stack import EmbeddedStack, StackOptions

    with tempfile.TemporaryDirectory() as tmp:
        options = StackOptions(topology_file=write_topology(Path(tmp)),
                               state_dir=Path(tmp) / "grid", loglevel="WARNING")
        stack = EmbeddedStack(options)
        settings = stack.start()
        try:
            app = create_app(settings)
            broker = Broker.for_settings(settings, app, lead=2.0, timeout=30.0)
            timed(PHASES, broker, "collection", "live collection read")
            timed(PHASES, broker.remote, "estimate", "estimate batch (3 RMs in parallel)")
            timed(PHASES, broker.remote, "reserve", "reserve batch (3 RMs in parallel)")
            timed(PHASES, broker.store, "replace", "token script (whole schedule)")
            timed(PHASES, broker.store, "confirm", "token confirmation")
            bare = bare_round_trips(app, args.runs)
            e2e, tries = coreservations(broker, args.runs)
            import gc

            broker.close()
            gc.collect()  # result objects unsubscribe while the stack's Redis is still up
            app.close()
        finally:
            stack.stop()
    b50, c50 = statistics.median(bare), statistics.median(e2e)
    print(f"(a) bare Celery round trip (scheduler queue) p50 {b50 * 1e3:.1f} ms, "
          f"p95 {percentile(bare, 0.95) * 1e3:.1f} ms ({len(bare)} runs)")
    print(f"(b) submit -> confirmed co-reservation of a 3-RM job p50 {c50 * 1e3:.1f} ms, "
          f"p95 {percentile(e2e, 0.95) * 1e3:.1f} ms ({len(e2e)} runs, "
          f"{statistics.mean(tries):.2f} schedules tried on average)")
    for phase, values in PHASES.items():
        print(f"    {phase}: p50 {statistics.median(values) * 1e3:.1f} ms")
    print(f"    ratio p50 {c50 / b50:.1f}x, p95 {percentile(e2e, 0.95) / percentile(bare, 0.95):.1f}x "
          "the bare round trip (at least 2 sequential batches of RM calls are needed)")


if __name__ == "__main__":
    main()
