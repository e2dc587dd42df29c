"""Beat failover: SIGKILL the leading beat, time until the standby's first send.

Runs real processes on a private redis-server: two ``grid-tasks beat`` (our
lease, standby polling every ``--poll``) and, as the peer, two plain
celery-redbeat beats with the same lock timeout (``redbeat_lock_timeout``) and
loop interval, whose standby retries its lock once per loop interval.  A probe
entry every 0.2 s goes to its own queue; a send is seen as a new message there.

    .venv/bin/python benchmarks/bench_failover.py [--runs 5] [--lease 2]

Prints each failover time, the p50 per variant, and the ratio ours / redbeat.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grid_tasks.embedded.redis_server import RedisServer  # noqa: E402
from grid_tasks.embedded.stack import grid_tasks_command  # noqa: E402

QUEUE = "bench-failover"
EVERY = 0.2

_PEER = """
import sys
from grid_tasks.celery_app import create_app
from grid_tasks.settings import Settings
s = Settings.from_env()
app = create_app(s)
lease = float(sys.argv[1])
app.conf.update(redbeat_redis_url=s.redis_url, redbeat_redis_options={},
                redbeat_key_prefix="bench:redbeat:", redbeat_lock_timeout=lease,
                beat_max_loop_interval=lease / 3,
                beat_schedule={"probe": {"task": "bench.probe", "schedule": %r,
                                         "options": {"queue": %r}}})
app.start(["beat", "-S", "redbeat.RedBeatScheduler", "-l", "WARNING"])
""" % (EVERY, QUEUE)

_INCLUDE = """
BEAT_SCHEDULE = {"probe": {"task": "bench.probe", "schedule": %r, "options": {"queue": %r}}}
""" % (EVERY, QUEUE)


def ours(name: str, lease: float, poll: float) -> list[str]:
    return grid_tasks_command("beat", "--lease", repr(lease), "--poll", repr(poll), "--name",
                              name, "--include", "bench_failover_probe", "--no-check",
                              "-l", "INFO")


def peer(name: str, lease: float, poll: float) -> list[str]:
    return [sys.executable, "-c", _PEER, repr(lease)]


def one_failover(env: dict[str, str], broker: redis.Redis, argv, lease: float,
                 poll: float, logs: Path) -> float:
    """Start A, then B; SIGKILL A; seconds until a message A did not send appears."""
    broker.flushall()
    procs = []
    try:
        for name in ("A", "B"):
            log = open(logs / f"{name}.log", "ab")
            procs.append(subprocess.Popen(argv(name, lease, poll), env=env, stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True))
            _wait(lambda: broker.llen(QUEUE) > 0, 30, "the first send")
        time.sleep(1.0)  # B is up and standing by
        os.killpg(procs[0].pid, signal.SIGKILL)
        killed = time.monotonic()
        procs[0].wait()
        time.sleep(0.01)
        seen = broker.llen(QUEUE)  # everything A sent before dying
        _wait(lambda: broker.llen(QUEUE) > seen, lease * 3 + 10, "the standby's send")
        return time.monotonic() - killed
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
                    which = "grid-tasks beat" if "beat" in p.args else "redbeat peer"
                    print(f"({which} did not stop within 10 s of SIGTERM; killed)",
                          file=sys.stderr)


def _wait(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.002)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--poll", type=float, default=0.1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        work = Path(tmp)
        (work / "bench_failover_probe.py").write_text(_INCLUDE)
        server = RedisServer(work / "redis").start()
        env = {k: v for k, v in os.environ.items() if not k.startswith("GRID_TASKS_")}
        env.update({"GRID_TASKS_BROKER_URL": server.url(1), "GRID_TASKS_RESULT_BACKEND":
                    server.url(2), "GRID_TASKS_REDIS_URL": server.url(3),
                    "GRID_TASKS_TOPOLOGY": str(ROOT / "config" / "demo-grid.toml"),
                    "GRID_TASKS_STATE_DIR": str(work / "state"),
                    "PYTHONPATH": os.pathsep.join([str(work), str(ROOT)])})
        broker = redis.Redis.from_url(server.url(1))
        results: dict[str, list[float]] = {}
        try:
            for label, argv in (("grid-tasks beat (lease)", ours), ("celery-redbeat lock", peer)):
                times = [one_failover(env, broker, argv, args.lease, args.poll, work)
                         for _ in range(args.runs)]
                results[label] = times
                print(f"{label:26s} lease {args.lease:g} s: "
                      + " ".join(f"{t:.2f}" for t in times)
                      + f"  -> p50 {statistics.median(times):.2f} s")
        finally:
            broker.close()
            server.stop()
    mine, theirs = (statistics.median(v) for v in results.values())
    print(f"failover p50: ours {mine:.2f} s (bound lease+poll = {args.lease + args.poll:.2f} s), "
          f"redbeat {theirs:.2f} s; ratio ours/redbeat {mine / theirs:.2f}")


if __name__ == "__main__":
    main()
