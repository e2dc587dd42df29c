"""Benchmark of reservation tokens (issue 8), on a private redis-server, in one run.

1. The raw ``EVALSHA`` rate of a trivial Lua script (``return 1``): the ceiling set by
   one client's round trips.
2. All-or-nothing token reservations of 4 resources per schedule (the real reserve
   script: bounds read, capacity check on each resource, one index write for every
   timeline and the expiry) - target: at least 50% of (1).
   Diagnostics printed beside them (issue 8 asks why the ratio is what it is): the
   load average, the Redis server time per call of both scripts (INFO commandstats,
   wall time: it grows when a loaded machine preempts the server), the server's CPU
   time per call (Linux schedstat, which preemption does not inflate), and the rate of
   a trivial script made to busy the server exactly as long as a reservation does -
   the best any script of that server cost could do through the same client, which
   separates the server's work from the client's.
3. For reference: plan + enact of a 3-RM coallocated job in-process (the planner over
   three Maui cores, then tokens taken and confirmed in Redis), p50 and p95.  This is
   not the full submit path (no Celery, no SQL): that belongs to the GRAM/DUROC issues.

Run: ``.venv/bin/python benchmarks/bench_tokens.py [--n 20000]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from grid_tasks.broker.enactor import Enactor
from grid_tasks.broker.planner import Need, maui_estimator, plan
from grid_tasks.embedded.redis_server import RedisServer
from grid_tasks.legion.tokens import Claim, TokenStore
from grid_tasks.maui import Node, Scheduler, SchedulerConfig


def server_us(store: TokenStore) -> float:
    """Server time per EVALSHA since the last stats reset (microseconds)."""
    stats = store.client.info("commandstats").get("cmdstat_evalsha", {})
    return float(stats.get("usec_per_call", 0.0))


def on_cpu_us(pid: int | None) -> float:
    """Microseconds process ``pid`` has run on a CPU (0 where schedstat is missing)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1000.0
    except (OSError, ValueError, IndexError):
        return 0.0


SERVER_PID: int | None = None  # the private redis-server's, for on_cpu_us
CPU: dict[str, float] = {}      # name -> server CPU us, summed over the blocks


def timed(store: TokenStore, calls: Callable[[], None],
          name: str = "") -> tuple[float, float]:
    """(seconds taken by ``calls()``, server us per EVALSHA meanwhile)."""
    store.client.config_resetstat()
    cpu = on_cpu_us(SERVER_PID)
    began = time.perf_counter()
    calls()
    took = time.perf_counter() - began
    CPU[name] = CPU.get(name, 0.0) + on_cpu_us(SERVER_PID) - cpu
    return took, server_us(store)


def rates(store: TokenStore, n: int, rounds: int = 40) -> dict[str, float]:
    """Raw EVALSHA, token reservation and equal-server-time rates, in alternating blocks.

    Alternating keeps the figures under the same machine load: on a shared host a
    burst of other work would otherwise land on one measurement only.  The third
    script spins the server for as long as the reservations took in the block
    before (its spin rate re-measured every block), so its rate is the ceiling for
    any script that costs the server that much.
    """
    raw = store.client.register_script("return 1")
    busy = store.client.register_script("for i = 1, tonumber(ARGV[1]) do end return 1")
    raw(), busy(args=[0])  # loads them: every later call is a plain EVALSHA
    spins_per_us = calibrate(store, busy)
    resources = [f"rm{i}/node{i}" for i in range(4)]
    store.set_capacities({r: 4 for r in resources})
    # each schedule a fresh slot, so the timelines grow as they would in service
    schedules = [[Claim(r, float(10 * i), float(10 * i + 10), 2) for r in resources]
                 for i in range(n)]
    block = max(1, n // rounds)
    took = {"raw": 0.0, "tokens": 0.0, "busy": 0.0}
    server = {"raw": [], "tokens": [], "busy": []}
    for r in range(rounds):
        part = schedules[r * block:(r + 1) * block]
        runs = {"raw": lambda: [raw() for _ in range(block)],
                "tokens": lambda: [store.take(claims, "bench") for claims in part]}
        spins = int(spins_per_us * server["tokens"][-1]) if server["tokens"] else 0
        if spins:
            runs["busy"] = lambda: [busy(args=[spins]) for _ in range(block)]
        for name, calls in runs.items():
            seconds, us = timed(store, calls, name)
            took[name] += seconds
            server[name].append(us)
        if spins:  # the spin rate drifts with the load: keep it calibrated
            spins_per_us = spins / max(server["busy"][-1] - server["raw"][-1], 1e-3)
    out = {f"{k}_rate": block * (rounds if k != "busy" else rounds - 1) / v
           for k, v in took.items() if v}
    out.update({f"{k}_server_us": statistics.median(v) for k, v in server.items() if v})
    out.update({f"{k}_cpu_us": CPU.get(k, 0.0) / (block * rounds) for k in ("raw", "tokens")})
    return out


def calibrate(store: TokenStore, busy: Any) -> float:
    """Loop iterations of the busy script per microsecond of server time."""
    _, us = timed(store, lambda: [busy(args=[20_000]) for _ in range(50)])
    return 20_000 / max(us, 1e-3)


def sweep(store: TokenStore, n: int, targets: Sequence[float] = (5, 10, 20, 30, 45)) -> None:
    """Print the rate of a script spinning the server for each target time, as a share of
    raw EVALSHA measured alternately: the server-time budget a 50% ratio leaves."""
    raw = store.client.register_script("return 1")
    busy = store.client.register_script("for i = 1, tonumber(ARGV[1]) do end return 1")
    spins_per_us = calibrate(store, busy)
    for target in targets:
        raw_s = busy_s = 0.0
        for _ in range(4):
            raw_s += timed(store, lambda: [raw() for _ in range(n // 4)])[0]
            spins = int(spins_per_us * target)
            seconds, us = timed(store, lambda: [busy(args=[spins]) for _ in range(n // 4)])
            busy_s += seconds
            spins_per_us = spins / max(us, 1e-3)
        print(f"  a script busy {target:4.0f} us on the server: {raw_s / busy_s:6.1%} of raw")


def co_reservation_latency(store: TokenStore, n: int) -> tuple[float, float]:
    nodes = {f"site{i}": [Node(f"s{i}n{j}", procs=8) for j in range(16)] for i in range(3)}
    rms = {rm: Scheduler(ns, SchedulerConfig.preset("conservative")) for rm, ns in nodes.items()}
    store.set_capacities({f"{rm}/{n.name}": n.procs for rm, ns in nodes.items() for n in ns})
    estimators = {rm: maui_estimator(s) for rm, s in rms.items()}
    enactor = Enactor(store, owner="bench-e2e")
    times = []
    now = 1_000_000.0
    for i in range(n):
        began = time.perf_counter()
        needs = [Need(procs=16, duration=600.0, rms=frozenset({rm})) for rm in rms]
        candidates = plan(needs, estimators, now, limit=4)
        enactor.enact(candidates, f"e2e-{i}", lambda schedule: True)
        times.append(time.perf_counter() - began)
        now += 700.0  # the previous co-reservation is over: same nodes again
    times.sort()
    return statistics.median(times), times[int(0.95 * (len(times) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000, help="calls per rate measurement")
    parser.add_argument("--sweep", action="store_true",
                        help="also show how the ratio falls with the server time of a script")
    args = parser.parse_args()
    global SERVER_PID
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp)) as server:
        SERVER_PID = server.process.pid if server.process else None
        store = TokenStore.from_url(server.url(0), ttl=600.0)
        load = os.getloadavg()[0]
        got = rates(store, args.n)
        raw, tokens, busy = got["raw_rate"], got["tokens_rate"], got.get("busy_rate", 0.0)
        print(f"load average (1 min) before / after:  {load:10.2f} / {os.getloadavg()[0]:.2f}"
              f"  on {os.cpu_count()} cores")
        print(f"raw EVALSHA (return 1):               {raw:10.0f} calls/s"
              f"   server {got['raw_server_us']:5.1f} us/call")
        print(f"token reservations, 4 resources each: {tokens:10.0f} schedules/s"
              f"   server {got['tokens_server_us']:5.1f} us/call")
        print(f"ratio to raw EVALSHA:                 {tokens / raw:10.1%}  (target >= 50%)")
        if got["tokens_cpu_us"]:
            print(f"server CPU per call (schedstat):      raw {got['raw_cpu_us']:.1f} us,"
                  f" reservation {got['tokens_cpu_us']:.1f} us")
        if busy:
            print(f"a script busy as long as a reservation: {busy:8.0f} calls/s"
                  f"   server {got['busy_server_us']:5.1f} us/call  ({busy / raw:.1%} of raw:"
                  " the ceiling at that server cost)")
        if args.sweep:
            sweep(store, max(400, args.n // 5))
        p50, p95 = co_reservation_latency(store, 200)
        print(f"plan + enact of a 3-RM job (in-process, no Celery): "
              f"p50 {p50 * 1000:.2f} ms, p95 {p95 * 1000:.2f} ms")


if __name__ == "__main__":
    main()
