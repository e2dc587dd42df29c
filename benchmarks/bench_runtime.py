"""Benchmark of the DUROC job side (issue 7): the coordination store and runtime library.

1. Barrier release: long-lived processes (2 subjobs of 1 and 1, then of 2 and 3
   processes) go through the start barrier of one coallocated job after another;
   a control loop awaits the entries and releases each job with the store's own
   calls.  Printed: the
   latency from the LAST barrier entry to EVERY process released (p50, p95), and
   the control side's share (entries seen -> release done).  Target ~1-2 ms.
   The figures are wall-clock across processes: on a loaded 2-core machine the
   p95 is mostly CPU scheduling of the woken processes.
2. Messages between two processes (same subjob, per-job ACL credentials):
   ping-pong round trip (p50, p95) and one-way throughput; next to the same
   exchange done with bare Redis RPUSH/BLPOP in the same run (the peer), so the
   cost of the runtime's checks, tags and scripts is visible as a ratio.

Run: ``.venv/bin/python benchmarks/bench_runtime.py [--jobs 200] [--messages 2000]``
(a private redis-server is started and stopped; nothing else is touched).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

from grid_tasks.duroc.store import CoordinationStore
from grid_tasks.duroc.store_models import SubjobSpec
from grid_tasks.embedded.redis_server import RedisServer
from grid_tasks.runtime import Runtime, RuntimeEnv

SHAPES = ((1, 1), (2, 3))  # processes per subjob: the 2 x 1, and 2 + 3


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(value: float) -> str:
    return f"{value * 1000:.2f} ms"


# -- roles run in child processes ---------------------------------------------------------

def role_barrier(urls_file: str, subjob: int, rank: int, size: int) -> None:
    """Pass the barrier of every job in turn; print (enter, pass) wall times per job."""
    urls = json.loads(Path(urls_file).read_text())
    times = []
    for job, url in urls:
        rt = Runtime(RuntimeEnv(url, job, subjob, rank, size))
        rt.store.client.ping()  # connect and authenticate first: not part of the barrier
        entered = time.time()
        rt.barrier(timeout=60)
        times.append((entered, time.time()))
        rt.close()
    print(json.dumps(times), flush=True)


def role_pingpong(url: str, job: str, rank: int, count: int, raw: bool) -> None:
    """Rank 0 pings and times; rank 1 answers; then rank 0 streams ``count`` messages."""
    client = redis.Redis.from_url(url)
    rt = Runtime(RuntimeEnv(url, job, 0, rank, 2))
    base = rt.keys.base

    def send(to: int, tag: str, data: bytes) -> None:
        if raw:
            client.rpush(f"{base}:raw:{to}:{tag}", data)
        else:
            rt.intra_subjob_send(to, tag, data)

    def receive(tag: str) -> bytes:
        if raw:
            return client.blpop([f"{base}:raw:{rank}:{tag}"], timeout=30)[1]
        return rt.intra_subjob_receive(tag, timeout=30)

    rtts = []
    for i in range(count):
        if rank == 0:
            started = time.perf_counter()
            send(1, "ping", b"%d" % i)
            receive("pong")
            rtts.append(time.perf_counter() - started)
        else:
            send(0, "pong", receive("ping"))
    started = time.perf_counter()
    for i in range(count):
        if rank == 0:
            send(1, "stream", b"x" * 64)
        else:
            receive("stream")
    if rank == 1:
        send(0, "done", b"")
    else:
        receive("done")
    print(json.dumps({"rtts": rtts, "stream_s": time.perf_counter() - started}), flush=True)


# -- orchestration -------------------------------------------------------------------------

def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, __file__, "--role", *args],
                            stdout=subprocess.PIPE, text=True)


def bench_barrier(store: CoordinationStore, url: str, jobs: int, workdir: Path,
                  shape: tuple[int, ...]) -> None:
    names = [f"bench-barrier-{len(shape)}x{'-'.join(map(str, shape))}-{i}" for i in range(jobs)]
    urls = []
    for name in names:
        store.create_job(name, [SubjobSpec(f"s{i}", n) for i, n in enumerate(shape)],
                         ttl_s=600)
        urls.append((name, store.grant_access(name, url)))
    urls_file = workdir / f"urls-{'-'.join(map(str, shape))}.json"
    urls_file.write_text(json.dumps(urls))
    procs = [spawn("barrier", str(urls_file), str(s), str(r), str(n))
             for s, n in enumerate(shape) for r in range(n)]
    control = []
    for name in names:
        store.await_entries(name, timeout=60)
        seen = time.perf_counter()
        store.release(name)
        control.append(time.perf_counter() - seen)
    per_proc = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    latencies = []
    for i in range(jobs):
        last_entry = max(times[i][0] for times in per_proc)
        all_released = max(times[i][1] for times in per_proc)
        latencies.append(all_released - last_entry)
    for name in names:
        store.purge(name)
    print(f"barrier, {jobs} jobs of {len(shape)} subjobs of {shape} processes:")
    print(f"  last entry -> every process released: p50 {ms(pct(latencies, .5))}, "
          f"p95 {ms(pct(latencies, .95))}")
    print(f"  control side (entries seen -> release done): p50 {ms(pct(control, .5))}, "
          f"p95 {ms(pct(control, .95))}")


def bench_messages(store: CoordinationStore, url: str, count: int) -> None:
    results = {}
    for raw in (False, True):
        job = f"bench-msg-{'raw' if raw else 'rt'}"
        store.create_job(job, [SubjobSpec("pair", 2)], ttl_s=600)
        job_url = url if raw else store.grant_access(job, url)
        procs = [spawn("pingpong", job_url, job, str(rank), str(count), "1" if raw else "0")
                 for rank in (1, 0)]
        outs = [json.loads(p.communicate(timeout=300)[0] or "{}") for p in procs]
        results[raw] = outs[1]
        store.purge(job)
        for key in store.client.scan_iter(match=f"{store.keys(job).base}:raw:*"):
            store.client.delete(key)  # the peer's bare lists are not the store's
    print(f"messages between two processes ({count} round trips, {count} one-way):")
    for raw, label in ((False, "runtime"), (True, "bare Redis RPUSH/BLPOP (peer)")):
        rtts, stream_s = results[raw]["rtts"], results[raw]["stream_s"]
        print(f"  {label}: round trip p50 {ms(pct(rtts, .5))}, p95 {ms(pct(rtts, .95))}; "
              f"{count / stream_s:,.0f} msg/s one-way")
    ratio = statistics.median(results[False]["rtts"]) / statistics.median(results[True]["rtts"])
    speed = (results[True]["stream_s"] / results[False]["stream_s"])
    print(f"  runtime / peer: round trip x{ratio:.2f}, throughput x{speed:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--role", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        role, *rest = args.role
        if role == "barrier":
            role_barrier(rest[0], int(rest[1]), int(rest[2]), int(rest[3]))
        else:
            role_pingpong(rest[0], rest[1], int(rest[2]), int(rest[3]), rest[4] == "1")
        return
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp) / "redis") as server:
        url = server.url(3)
        store = CoordinationStore.from_url(url)
        for shape in SHAPES:
            bench_barrier(store, url, args.jobs, Path(tmp), shape)
        bench_messages(store, url, args.messages)
        store.close()


if __name__ == "__main__":
    main()
