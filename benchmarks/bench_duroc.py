"""DUROC coallocation measured in one run on the embedded demo grid.

(a) a bare Celery chord of the same shape: two no-op header tasks on the two
    gatekeeper queues (gram.rmA, gram.rmB), a no-op body on the scheduler queue;
(b) the start cost of one job process alone (the Python program importing the
    runtime library), what every subjob pays before it can enter the barrier;
(c) coallocated jobs of 2 subjobs x 1 process (rmA + rmB), one at a time:
    latency from the last barrier entry to the release (store event times),
    submit-to-released latency (p50, p95); then many at once: jobs per second.
Each sequential job is measured together with a bare chord and a process start
alone, so a machine that is busy for a while weighs on all three alike.  The
coordination overhead is the median over jobs of submit-to-released minus that
job's process start, compared to the bare chord p50 (target: within 2x).  The jobs
run in ``--rounds`` rounds of ``--jobs``; the verdict is the median of the rounds'
ratios (this machine's speed drifts by tens of percent within a minute, and one
round's ratio with it).  ``--profile`` adds where submit-to-released goes, stage by
stage along each job's critical path (the subjob whose processes entered last):

    request     job_request: SQL rows, coordination store, runtime access, chord sent
    dispatch    the header task reaching the gatekeeper and submitting the GRAM job
    iteration   GRAM submission -> the job's process spawned (its recorded start): the
                RM's Maui iteration, the launch task, the job manager (GRAM side)
    launch      spawned -> the job program begins to run: interpreter start (the OS)
    process     the program running -> all of the subjob's processes in the barrier
                (runtime import, store connection, barrier entry)
    release     last barrier entry -> the barrier released (store event)

(d) broker messages per waiting subjob per second: a job whose second subjob reaches
the barrier 5 s late is watched through MONITOR on the stack's Redis while both of its
subjobs wait (the header tasks' publishes were 2 per subjob per second while they
re-queued themselves to look; the target is 0).

``--cpu`` adds, from further sequential jobs, the CPU the machine spent from submit to
released, by process kind (see ``cpu_window``): whether that window is CPU-bound.

    .venv/bin/python benchmarks/bench_duroc.py [--jobs 20] [--rounds 3] [--concurrent 20]
                                               [--profile] [--cpu]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import redis

# The job program prints the time it began running (before any import), so the
# profile can split job manager spawn from the program's own start-up.
START_PROGRAM = "import time; print(repr(time.time()), flush=True); from grid_tasks import runtime"
PROGRAM = START_PROGRAM + "; runtime.barrier()"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def chord_once(app) -> float:
    """One bare chord round trip: 2 no-op headers on the gatekeeper queues, a no-op body."""
    from celery import chord

    from grid_tasks.duroc.control_rows import detach
    from grid_tasks.scheduling.tasks import PING

    t0 = time.perf_counter()
    header = [app.signature(PING, immutable=True).set(queue=f"gram.{rm}")
              for rm in ("rmA", "rmB")]
    result = chord(header, app=app)(app.signature(PING, immutable=True))
    result.get(timeout=60)
    elapsed = time.perf_counter() - t0
    detach(result)  # no result object outlives the stack's Redis
    return elapsed


def start_once() -> float:
    """The job program without its barrier call: interpreter and runtime import alone."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", START_PROGRAM], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def rsl(late_s: float = 0.0) -> str:
    """2 subjobs x 1 process; with ``late_s`` rmB's enters the barrier that much later."""
    comp = ('(&(resourceManagerContact={rm})(label={rm})(count=1)'
            f'(executable="{sys.executable}")(arguments="-c" "{{program}}"))')
    late = START_PROGRAM + f"; time.sleep({late_s}); runtime.barrier()"
    return "+" + comp.format(rm="rmA", program=PROGRAM) + \
        comp.format(rm="rmB", program=late if late_s else PROGRAM)


class Publishes:
    """Messages published to the broker (kombu's Redis transport: LPUSH/RPUSH on the
    broker's database) while open, by task name, seen through MONITOR."""

    def __init__(self, broker_url: str) -> None:
        self.client = redis.Redis.from_url(broker_url)
        self.db = int(self.client.connection_pool.connection_kwargs.get("db", 0))
        self.tasks: list[str] = []
        self.ready, self.stopped = threading.Event(), False
        self.thread = threading.Thread(target=self._listen, daemon=True)

    def _listen(self) -> None:
        with self.client.monitor() as monitor:
            self.ready.set()
            for command in monitor.listen():
                if self.stopped:
                    return
                verb = command["command"].split(" ", 1)[0].upper()
                if command.get("db") == self.db and verb in ("LPUSH", "RPUSH"):
                    found = re.search(r'"task": "([^"]+)"', command["command"])
                    self.tasks.append(found.group(1) if found else "?")

    def __enter__(self) -> "Publishes":
        self.thread.start()
        self.ready.wait(5)
        time.sleep(0.1)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stopped = True
        self.client.ping()
        self.thread.join(5)
        self.client.close()


def waiting_messages(settings, grid, window_s: float = 2.0) -> tuple[float, list[str]]:
    """(DUROC broker messages per waiting subjob per second, every task published) over
    ``window_s`` while both subjobs of a job wait at or before the barrier."""
    from grid_tasks.duroc.records import store_id

    store = grid.coallocator.store
    job = grid.job_request(rsl(late_s=5.0 + window_s), barrier_timeout=60)
    deadline = time.monotonic() + 30
    while (store.snapshot(store_id(job.id)).subjobs[0].entered or 0) < 1:  # rmA's is in
        if time.monotonic() > deadline:
            raise SystemExit(f"job {job.id}: rmA's subjob never entered the barrier")
        time.sleep(0.05)
    with Publishes(settings.broker_url) as seen:
        time.sleep(window_s)
    if store.snapshot(store_id(job.id)).state.value != "open":
        raise SystemExit(f"job {job.id}: released during the window, measure again")
    if job.wait(timeout=60).state.value != "DONE":
        raise SystemExit(f"job {job.id} did not end DONE")
    duroc = [t for t in seen.tasks if t.startswith("grid_tasks.duroc.")]
    return len(duroc) / (2 * window_s), seen.tasks


def store_events(store, job_id: int, timeout: float = 60) -> dict[str, float]:
    """Event times in seconds (from the stream ids): ``complete:<address>``, ``released``."""
    from grid_tasks.duroc.records import store_id

    events = store.keys(store_id(job_id)).events
    deadline, last = time.monotonic() + timeout, "0-0"
    times: dict[str, float] = {}
    while "released" not in times:
        if time.monotonic() > deadline:
            raise SystemExit(f"coallocated job {job_id} not released in {timeout} s")
        for _, entries in store.client.xread({events: last}, block=1000) or []:
            for entry_id, fields in entries:
                last = entry_id
                stamp = int(entry_id.decode().split("-")[0]) / 1000
                kind = fields.get(b"type", b"").decode()
                if kind == "complete":
                    times[f"complete:{fields[b'address'].decode()}"] = stamp
                elif kind == "released":
                    times["released"] = stamp
                elif kind == "aborted":
                    raise SystemExit(f"coallocated job {job_id} aborted: {fields}")
    return times


def stages(grid, job_id: int, t0: float, returned: float,
           events: dict[str, float]) -> dict[str, float]:
    """The critical path of one job, stage by stage (seconds; see the module doc)."""
    from grid_tasks.db import session_scope
    from grid_tasks.db.models import CoallocatedJob

    completes = {int(k.split(":")[1]): v for k, v in events.items() if k.startswith("complete:")}
    last = max(completes, key=completes.get)
    with session_scope(grid.sessions) as session:
        sub = next(s for s in session.get(CoallocatedJob, job_id).subjobs if s.position == last)
        gram = sub.gram_job
        gram_id, submitted = gram.id, gram.submit_time.timestamp()
        started = gram.start_time.timestamp()
    running = float(grid.job(gram_id).output().split()[0])
    return {"request": returned - t0, "dispatch": submitted - returned,
            "iteration": started - submitted, "launch": running - started,
            "process": completes[last] - running,
            "release": events["released"] - completes[last]}


def coalloc_latency(app, grid, n: int) -> dict[str, list[Any]]:
    """``n`` coallocated jobs (after two warm-up ones), each right after a bare chord and
    a process start alone: paired in time, so a machine busy for a while weighs on all
    three alike."""
    got: dict[str, list[Any]] = {k: [] for k in ("chord", "start", "e2r", "s2r", "profile")}
    store = grid.coallocator.store
    for _ in range(5):
        chord_once(app)
    for i in range(n + 2):
        chord_s, start_s = chord_once(app), start_once()
        t0 = time.time()
        job = grid.job_request(rsl(), barrier_timeout=60)
        returned = time.time()
        events = store_events(store, job.id)
        status = job.wait(timeout=60)
        if status.state.value != "DONE":
            raise SystemExit(f"job {job.id} ended {status.state.value}: {status.reason}")
        if i >= 2:  # the first two warm up workers and connections
            completes = [v for k, v in events.items() if k.startswith("complete:")]
            got["chord"].append(chord_s)
            got["start"].append(start_s)
            got["e2r"].append(events["released"] - max(completes))
            got["s2r"].append(events["released"] - t0)
            got["profile"].append(stages(grid, job.id, t0, returned, events))
    return got


def print_profile(profiles: list[dict[str, float]], chord_s: float, start_s: float) -> None:
    print("    critical path, stage by stage (p50 / p95 ms):")
    for name in profiles[0]:
        values = [p[name] for p in profiles]
        print(f"      {name:<10} {statistics.median(values) * 1e3:8.1f} / "
              f"{percentile(values, 0.95) * 1e3:8.1f}")
    duroc = statistics.median(p["request"] + p["dispatch"] + p["release"] for p in profiles)
    gram = statistics.median(p["iteration"] + p["launch"] for p in profiles)
    print(f"    DUROC's own share (request + dispatch + release) p50 {duroc * 1e3:.1f} ms = "
          f"{duroc / chord_s:.1f}x the bare chord; GRAM's (iteration + launch) p50 "
          f"{gram * 1e3:.1f} ms")
    started = statistics.median(p["launch"] + p["process"] for p in profiles)
    print(f"    the job's processes, spawned -> all in the barrier, p50 {started * 1e3:.1f} ms: "
          f"{(started - start_s) * 1e3:+.1f} ms against a process start alone (more: slowed "
          "by the grid's work and by each other)")


def coalloc_cpu(stack, grid, n: int) -> tuple[Any, float]:
    """CPU seconds per process kind, and wall seconds, summed over the submit -> released
    windows of ``n`` sequential jobs (a separate phase: sampling costs CPU itself)."""
    from collections import Counter

    from cpu_window import CpuMeter

    meter, spent, wall = CpuMeter(stack), Counter(), 0.0
    for _ in range(n):
        before, t0 = meter.sample(), time.perf_counter()
        job = grid.job_request(rsl(), barrier_timeout=60)
        store_events(grid.coallocator.store, job.id)
        wall += time.perf_counter() - t0
        spent.update(meter.sample() - before)  # a job's window only, not its end
        if job.wait(timeout=60).state.value != "DONE":
            raise SystemExit(f"job {job.id} did not end DONE")
        time.sleep(0.1)  # the previous job's end settles outside the next window
    return spent, wall


def coalloc_throughput(grid, n: int) -> float:
    t0 = time.perf_counter()
    jobs = [grid.job_request(rsl(), barrier_timeout=120) for _ in range(n)]
    for job in jobs:
        status = job.wait(timeout=180)
        if status.state.value != "DONE":
            raise SystemExit(f"job {job.id} ended {status.state.value}: {status.reason}")
    return n / (time.perf_counter() - t0)


def overhead_ratio(got: dict[str, list[Any]]) -> tuple[float, float]:
    """(coordination overhead p50, its ratio to the bare chord p50) of one set of rounds."""
    overhead = statistics.median(t - st for t, st in zip(got["s2r"], got["start"]))
    return overhead, overhead / statistics.median(got["chord"])


def report(rounds: list[dict[str, list[Any]]], rate: float, args: Any,
           cpu: tuple[Any, float] | None = None,
           waiting: tuple[float, list[str]] | None = None) -> None:
    got = {k: [v for r in rounds for v in r[k]] for k in rounds[0]}  # every round pooled
    chord_s, start_s = statistics.median(got["chord"]), statistics.median(got["start"])
    e2r, s2r = got["e2r"], got["s2r"]
    print(f"(a) bare Celery chord (2 headers on gram.rmA/gram.rmB + body) p50 "
          f"{chord_s * 1e3:.1f} ms")
    print(f"(b) job process start alone (python + runtime import) p50 {start_s * 1e3:.1f} ms")
    print(f"(c) last barrier entry -> release p50 {statistics.median(e2r) * 1e3:.1f} ms "
          f"(target < 10 ms), p95 {percentile(e2r, 0.95) * 1e3:.1f} ms")
    print(f"    submit -> released p50 {statistics.median(s2r) * 1e3:.1f} ms, p95 "
          f"{percentile(s2r, 0.95) * 1e3:.1f} ms ({len(s2r)} jobs, 2 subjobs x 1 process)")
    overhead, _ = overhead_ratio(got)
    ratios = [overhead_ratio(r)[1] for r in rounds]
    ratio = statistics.median(ratios)
    print(f"    coordination overhead = p50 of (submit->released - process start, measured "
          f"together) = {overhead * 1e3:.1f} ms; per round of {args.jobs} jobs "
          f"{' '.join(f'{r:.2f}x' for r in ratios)} the bare chord, median {ratio:.2f}x "
          f"(target <= 2x: {'OK' if ratio <= 2 else 'MISSED'})")
    print(f"    throughput {rate:.2f} coallocated jobs/s ({args.concurrent} submitted at once)")
    if waiting is not None:
        others = sorted(set(waiting[1]))
        print(f"(d) DUROC broker messages per waiting subjob per second {waiting[0]:.2f} "
              f"(target 0); all publishes in the window: {len(waiting[1])} "
              f"({', '.join(others) or 'none'})")
    if args.profile:
        print_profile(got["profile"], chord_s, start_s)
    if cpu is not None:
        from cpu_window import report as report_cpu

        report_cpu(cpu[0], cpu[1], args.jobs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20, help="sequential jobs per round")
    parser.add_argument("--rounds", type=int, default=3,
                        help="latency rounds; the verdict is the median of their ratios "
                             "(this machine's speed drifts within a minute)")
    parser.add_argument("--concurrent", type=int, default=20, help="jobs at once")
    parser.add_argument("--profile", action="store_true",
                        help="also print where submit -> released goes, stage by stage")
    parser.add_argument("--cpu", action="store_true",
                        help="also print the CPU spent from submit to released, by process "
                             "kind (--jobs more sequential jobs)")
    args = parser.parse_args()

    from grid_tasks.celery_app import create_app
    from grid_tasks.client import Grid
    from grid_tasks.embedded.stack import EmbeddedStack, StackOptions

    with tempfile.TemporaryDirectory() as tmp:
        stack = EmbeddedStack(StackOptions(state_dir=Path(tmp) / "grid", loglevel="WARNING"))
        settings = stack.start()
        try:
            app, grid = create_app(settings), Grid(settings)
            rounds = [coalloc_latency(app, grid, args.jobs) for _ in range(args.rounds)]
            rate = coalloc_throughput(grid, args.concurrent)
            waiting = waiting_messages(settings, grid)
            cpu = coalloc_cpu(stack, grid, args.jobs) if args.cpu else None
            import gc

            gc.collect()  # result objects unsubscribe while the stack's Redis is still up
            grid.close()
            app.close()
        finally:
            stack.stop()
    report(rounds, rate, args, cpu, waiting)


if __name__ == "__main__":
    main()
