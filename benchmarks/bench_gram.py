"""GRAM on Celery, measured in one run on the embedded demo grid.

(a) bare Celery round trip (one no-op task, waited for) and throughput (N at once);
(b) submit-to-ACTIVE and submit-to-DONE latency (p50, p95) of /bin/true jobs, one at a time;
(c) throughput of many /bin/true jobs submitted at once through the demo grid.
Ratios are to (a), measured on the same Redis in the same run.  The bare tasks run on
the grid's own scheduler-queue workers (same processes, same thread pools).  The two
throughputs are measured in alternating rounds (``--rounds``, default 3) and compared
by their medians, so a machine that is busier for a while weighs on both alike.

On a shared host the ratios move with the other load, so the CPU seconds every process
of the run (workers, redis-server, this client) spent per bare task and per job are
printed too: their ratio is the throughput ratio the design allows when CPU is what
limits, whatever else the machine runs.

    .venv/bin/python benchmarks/bench_gram.py [--jobs 1000] [--latency-jobs 40] [--rounds 3]

``--signing`` (issue 20) measures what message signing costs instead: the same
workload (submit->ACTIVE latency one job at a time, then ``--jobs`` jobs from
``--clients`` threads) runs signed and unsigned, in alternating rounds, each round on
its own fresh embedded stack in its own process (``--round signed|unsigned``): kombu's
serializer registry is process-wide, so a client that signed with one stack's user key
never sends the unsigned round's messages.  Targets: signed throughput >= 80% of
unsigned, signed submit->ACTIVE p50 within 1.25x of unsigned.

    .venv/bin/python benchmarks/bench_gram.py --signing --jobs 300 --latency-jobs 40 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


class Listener(threading.Thread):
    """Records when each job's ACTIVE and DONE events arrive (pattern subscription)."""

    def __init__(self, client) -> None:
        super().__init__(daemon=True)
        self.pubsub = client.pubsub(ignore_subscribe_messages=True)
        self.pubsub.psubscribe("grid_tasks:job:*:events")
        self.seen: dict[tuple[int, str], float] = {}
        self.done = threading.Condition()

    def run(self) -> None:
        try:
            self._listen()
        except Exception:  # the connection closes when the benchmark ends
            return

    def _listen(self) -> None:
        for message in self.pubsub.listen():
            if message["type"] != "pmessage":
                continue
            event = json.loads(message["data"])
            with self.done:
                self.seen.setdefault((event["job"], event["state"]), time.perf_counter())
                self.done.notify_all()

    def wait_for(self, jobs: list[int], state: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self.done:
            while not all((j, state) in self.seen or (j, "FAILED") in self.seen for j in jobs):
                if not self.done.wait(max(0.0, deadline - time.monotonic())):
                    missing = [j for j in jobs if (j, state) not in self.seen]
                    raise SystemExit(f"timed out: {len(missing)} jobs never {state}")


class CpuMeter:
    """CPU seconds (user + system) spent by the stack's processes and this one, with the
    children they reaped (the jobs' own processes); ``by_group`` splits them by role
    (client, gatekeeper, scheduler, node, beat, redis): where a cost lands."""

    def __init__(self, stack) -> None:
        import psutil

        groups: dict[str, list] = {"client": [psutil.Process()]}
        for child in stack.supervisor.children:
            root = psutil.Process(child.pid)
            groups.setdefault(child.name.split("-")[0], []).extend(
                [root, *root.children(recursive=True)])
        if stack.redis.pid:
            groups["redis"] = [psutil.Process(stack.redis.pid)]
        self.groups = groups
        self.start: dict[str, float] = {}

    def totals(self) -> dict[str, float]:
        import psutil

        spent = dict.fromkeys(self.groups, 0.0)
        for group, procs in self.groups.items():
            for proc in procs:
                try:
                    times = proc.cpu_times()
                except psutil.Error:
                    continue
                spent[group] += times.user + times.system + times.children_user \
                    + times.children_system
        return spent

    def __enter__(self) -> "CpuMeter":
        self.start = self.totals()
        return self

    def __exit__(self, *_) -> None:
        end = self.totals()
        self.by_group = {g: end[g] - self.start[g] for g in end}
        self.spent = sum(self.by_group.values())


def round_trip(app) -> float:
    """p50 of 100 bare round trips (after 20 warming up connections and the worker)."""
    from grid_tasks.scheduling.tasks import PING

    for _ in range(20):
        app.send_task(PING).get(timeout=30)
    trips = []
    for _ in range(100):
        t0 = time.perf_counter()
        app.send_task(PING).get(timeout=30)
        trips.append(time.perf_counter() - t0)
    return statistics.median(trips)


def bare(app, n: int, meter) -> tuple[float, float]:
    """(tasks per second, CPU seconds per task) of ``n`` bare tasks sent at once."""
    from grid_tasks.scheduling.tasks import PING

    with meter as cpu:
        t0 = time.perf_counter()
        results = [app.send_task(PING) for _ in range(n)]
        for r in results:
            r.get(timeout=120)
        rate = n / (time.perf_counter() - t0)
    return rate, cpu.spent / n


def latency(grid, listener: Listener, n: int) -> tuple[list[float], list[float]]:
    to_active, to_done = [], []
    for i in range(n + 3):
        t0 = time.perf_counter()
        job = grid.submit("&(executable=/bin/true)", rm="rmA" if i % 2 else "rmB")
        listener.wait_for([job.id], "DONE", 60)
        if i < 3:
            continue  # warm-up
        to_active.append(listener.seen[(job.id, "ACTIVE")] - t0)
        to_done.append(listener.seen[(job.id, "DONE")] - t0)
    return to_active, to_done


def throughput(grid, listener: Listener, n: int, progress, clients: int) -> float:
    """All jobs submitted by ``clients`` threads at once; the clock stops at the last DONE."""
    from concurrent.futures import ThreadPoolExecutor

    def one(i: int) -> int:
        job_id = grid.submit("&(executable=/bin/true)", rm="rmA" if i % 3 else "rmB").id
        progress()
        return job_id

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        ids = list(pool.map(one, range(n)))
    listener.wait_for(ids, "DONE", 600)
    return n / (time.perf_counter() - t0)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="--signing: signed against unsigned, each round on a fresh stack (issue 20)")
    parser.add_argument("--jobs", type=int, default=1000,
                        help="bare tasks and /bin/true jobs per throughput round "
                             "(default 1000)")
    parser.add_argument("--latency-jobs", type=int, default=40,
                        help="jobs submitted one at a time for submit->ACTIVE (default 40)")
    parser.add_argument("--clients", type=int, default=4,
                        help="submitting threads in (c) (default 4)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternating rounds of bare and job throughput, or with "
                             "--signing of signed and unsigned stacks (default 3)")
    parser.add_argument("--logs", type=Path,
                        help="keep the grid's logs (INFO: one line per iteration) here")
    parser.add_argument("--signing", action="store_true",
                        help="compare signed with unsigned messages (same workload, "
                             "alternating rounds, a fresh stack each) against the targets")
    parser.add_argument("--json", action="store_true",
                        help="with --signing: print the figures as one JSON object")
    parser.add_argument("--round", choices=["signed", "unsigned"],
                        help="run one round of one mode on a fresh stack and print its "
                             "figures as JSON (what --signing runs in each subprocess)")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.round:
        print(json.dumps(one_round(args.round == "signed", args)))
    elif args.signing:
        from bench_gram_signing import compare_signing

        compare_signing(args)
    else:
        classic(args)


@contextmanager
def running_grid(args: argparse.Namespace, signing: bool) -> Iterator[tuple]:
    """A fresh embedded stack (signed or not) and its user's client: (stack, app, grid,
    listener); stopped after, its logs kept in ``--logs`` if asked."""
    from grid_tasks.celery_app import create_app
    from grid_tasks.client import Grid
    from grid_tasks.embedded.stack import EmbeddedStack, StackOptions

    with tempfile.TemporaryDirectory() as tmp:
        stack = EmbeddedStack(StackOptions(state_dir=Path(tmp) / "grid", signing=signing,
                                           loglevel="INFO" if args.logs else "WARNING"))
        settings = stack.start()  # the user's settings: its key when signed
        try:
            app, grid = create_app(settings), Grid(settings)
            listener = Listener(grid.redis)
            listener.start()
            yield stack, app, grid, listener
            grid.close()
            app.close()
        finally:
            stack.stop()
            if args.logs:
                shutil.copytree(stack.state_dir / "logs", args.logs, dirs_exist_ok=True)


def classic(args: argparse.Namespace) -> None:
    """(a), (b) and (c) on one signed stack (the embedded stack's default)."""
    from rich.progress import Progress

    with running_grid(args, signing=True) as (stack, app, grid, listener):
        trip = round_trip(app)
        active, done = latency(grid, listener, args.latency_jobs)
        rounds = []  # (bare rate, bare CPU per task, job rate, job CPU per job)
        with Progress() as bar:
            task = bar.add_task("bare tasks and jobs", total=args.rounds * args.jobs)
            for _ in range(args.rounds):
                bare_rate, bare_cpu = bare(app, args.jobs, CpuMeter(stack))
                with CpuMeter(stack) as meter:
                    rate = throughput(grid, listener, args.jobs,
                                      lambda: bar.advance(task), args.clients)
                rounds.append((bare_rate, bare_cpu, rate, meter.spent / args.jobs))
    report_classic(args, trip, active, done, rounds)


def report_classic(args: argparse.Namespace, trip: float, active: list[float],
                   done: list[float], rounds: list[tuple[float, float, float, float]]) -> None:
    p50a, p95a = percentile(active, 0.5), percentile(active, 0.95)
    p50d, p95d = percentile(done, 0.5), percentile(done, 0.95)
    bare_rate, bare_cpu, rate, job_cpu = (statistics.median(r[i] for r in rounds)
                                          for i in range(4))
    print(f"(a) bare Celery round trip p50 {trip * 1e3:.2f} ms; "
          f"throughput {bare_rate:.0f} tasks/s ({args.jobs} tasks; median of {args.rounds} "
          f"rounds: {', '.join(f'{r[0]:.0f}' for r in rounds)})")
    print(f"(b) submit->ACTIVE p50 {p50a * 1e3:.1f} ms, p95 {p95a * 1e3:.1f} ms "
          f"({p50a / trip:.1f}x bare round trip; target <= 5x)")
    print(f"    submit->DONE   p50 {p50d * 1e3:.1f} ms, p95 {p95d * 1e3:.1f} ms "
          f"({p50d / trip:.1f}x bare round trip)")
    print(f"(c) {args.jobs} /bin/true jobs from {args.clients} clients: {rate:.1f} jobs/s "
          f"({100 * rate / bare_rate:.0f}% of bare task throughput; target >= 30%)")
    print("    rounds (jobs/s, % of that round's bare): " + ", ".join(
        f"{r[2]:.1f} ({100 * r[2] / r[0]:.0f}%)" for r in rounds))
    print(f"    CPU of all processes: {bare_cpu * 1e3:.1f} ms per bare task, "
          f"{job_cpu * 1e3:.1f} ms per job ({100 * bare_cpu / job_cpu:.0f}%: the throughput "
          "ratio when CPU is the limit)")


def one_round(signing: bool, args: argparse.Namespace) -> dict:
    """One mode's figures on its own fresh stack (``--round``): bare round trip,
    submit->ACTIVE latencies, throughput and CPU per job; what the client signed with."""
    from grid_tasks.security.refusals import counts

    with running_grid(args, signing) as (stack, app, grid, listener):
        out = {"signing": signing, "serializer": grid.app.conf.task_serializer,
               "trip": round_trip(app)}
        out["active"], out["done"] = latency(grid, listener, args.latency_jobs)
        with CpuMeter(stack) as meter:
            out["rate"] = throughput(grid, listener, args.jobs, lambda: None, args.clients)
        out["cpu_per_job"] = meter.spent / args.jobs
        out["cpu_by_group"] = {g: t / args.jobs for g, t in meter.by_group.items()}
        out["refused"] = counts(grid.redis)
        out["load"] = os.getloadavg()[0]  # the machine's other work, for the reader
    return out


if __name__ == "__main__":
    main()
