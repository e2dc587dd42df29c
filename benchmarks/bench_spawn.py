"""Benchmark of one process start on a node (issue 20): the worker's cost of
``check_host`` + ``open_outputs`` + ``spawn`` for a job run as the worker and for a
job mapped to another account (root worker only; a throwaway account is created and
removed).  The worker process is made large first (a ballast heap, as a node daemon
with Celery, kombu and SQLAlchemy loaded), since ``fork`` costs grow with it and
``vfork`` costs do not.  Printed: p50 and p95 in ms over ``--spawns`` starts of the
worker's time, and p50 until ``/bin/true`` has exited (what the launch chain adds).

Run: ``.venv/bin/python benchmarks/bench_spawn.py [--spawns 300]``
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

from grid_tasks.gram.launch import LaunchRequest, account_for, check_host, open_outputs, spawn

BALLAST_MB = 150  # resident heap of a loaded worker, roughly


@contextmanager
def account() -> Iterator[str | None]:
    """A throwaway unprivileged account (None when not root)."""
    if os.geteuid() != 0:
        yield None
        return
    name = f"gtbench{secrets.token_hex(3)}"
    subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
                    "--shell", "/usr/sbin/nologin", "--user-group", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], check=False)


def one_start(req: LaunchRequest) -> tuple[float, float]:
    """Seconds the worker spends starting one process of ``req``, and until it ended."""
    t0 = time.perf_counter()
    who = account_for(req)
    directory, argv = check_host(req, who)
    out, err = open_outputs(req, directory, who)
    proc = spawn(req, argv, directory, 0, req.stdin, who)
    elapsed = time.perf_counter() - t0
    proc.communicate()
    ended = time.perf_counter() - t0
    for f in (out, err):
        if f is not None:
            f.close()
    return elapsed, ended


def measure(label: str, req: LaunchRequest, n: int) -> None:
    for name in (req.stdout, req.stderr):  # created afresh, by this case's account
        if name and os.path.exists(os.path.join(req.directory or "", name)):
            os.unlink(os.path.join(req.directory or "", name))
    runs = [one_start(req) for _ in range(n)]
    times = sorted(started for started, _ in runs)
    print(f"{label:34s} p50 {statistics.median(times) * 1e3:6.3f} ms   "
          f"p95 {times[int(0.95 * len(times))] * 1e3:6.3f} ms   until exit p50 "
          f"{statistics.median(ended for _, ended in runs) * 1e3:6.3f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spawns", type=int, default=300)
    args = parser.parse_args()
    ballast = bytearray(BALLAST_MB * 1024 * 1024)
    ballast[::4096] = b"x" * len(ballast[::4096])  # touch every page
    with tempfile.TemporaryDirectory() as tmp, account() as user:
        os.chmod(tmp, 0o777)
        with open(os.path.join(tmp, "in"), "w") as f:
            f.write("hello\n")
        os.chmod(os.path.join(tmp, "in"), 0o644)
        base = dict(job_id=1, rm="rmA", node="node1", token="t", executable="/bin/true",
                    tasks=1, rank_offset=0, size=1, nodes=1, directory=tmp)
        files = dict(stdin="in", stdout="out", stderr="err")
        measure("as the worker", LaunchRequest(**base), args.spawns)
        measure("as the worker, stdin/out/err", LaunchRequest(**base, **files), args.spawns)
        if user:
            measure(f"as {user}", LaunchRequest(**base, run_as=user), args.spawns)
            measure(f"as {user}, stdin/out/err", LaunchRequest(**base, **files, run_as=user),
                    args.spawns)


if __name__ == "__main__":
    main()
