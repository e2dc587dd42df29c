"""Slurm clusters as grid resource managers, measured in one run (issue 24's benchmark).

Two private Slurm clusters (``a``, ``b``: two slurmd of 2 CPUs each, ``batch_sched_delay=0``)
and a native RM (``rmA``, one node) behind the embedded stack (scheduler workers, one
gatekeeper per RM, node daemon), all on this machine:

(a) submit -> running: bare ``sbatch`` of a one-process batch job vs the same job
    submitted through grid_tasks to the Slurm RM (``jobType=single``: the batch script
    runs the program, as ``sbatch --wrap`` does).  Both measured to the moment the job's
    program stamps the clock; grid_tasks also to the client seeing ACTIVE (the RM's
    follower recording Slurm's RUNNING).  Runs alternate, so drift weighs on both alike.
    Every submission of (a) and (b) meets an idle cluster.  Target: grid_tasks within
    1.2x of bare Slurm.
(b) a coallocated job, one subjob on the native RM and one on cluster ``a``: submit ->
    released (the first process back from ``runtime.barrier()``), p50, and the skew
    between the subjobs' returns.  Target: at most bare Slurm's start latency plus 0.5 s
    (the Python start of the job program, measured alone, is printed for context).
(c) a co-reserved coallocated job on the two Slurm clusters (one subjob on each, the
    broker co-reserving both with one common start ``--lead`` s away, a Slurm
    reservation per cluster): the skew between the subjobs' starts (each job program
    stamps the clock first thing; Slurm starts a job of a reservation 0-5 s after its
    start, at its 5 s reservation check), how late each started after the common start,
    and the skew between their returns from ``runtime.barrier()`` (target 0).
(d) estimate latency per cluster: the broker's estimate through the Slurm RM's
    gatekeeper (a Celery round trip) and the ``sbatch --test-only`` call alone (target:
    < 50 ms); and the estimate's error against the real start of the bare job submitted
    right after it.

Needs root and Debian's slurm-wlm and munge.

    .venv/bin/python benchmarks/bench_slurm.py [--runs 10] [--only abcd]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CLUSTERS = {"a": 2, "b": 2}
BARRIER_PROGRAM = ("import sys, time\nfrom grid_tasks import runtime\nruntime.barrier()\n"
                   "open(sys.argv[1], 'w').write(repr(time.time()))\n")
STAMP = "date +%s.%N > {file}; sleep 1"
# Stamps its start before anything else, then its return from the barrier.
CORESERVED_PROGRAM = ("import sys, time\nbegan = time.time()\nfrom grid_tasks import runtime\n"
                      "runtime.barrier()\n"
                      "open(sys.argv[1], 'w').write(f'{began!r} {time.time()!r}')\n")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def write_topology(directory: Path, site: Any) -> Path:
    from grid_tasks.settings import default_config_file

    policy = default_config_file("demo.cfg").resolve()
    text = (f'[rm.rmA]\npolicy_file = "{policy}"\n\n[rm.rmA.node.node1]\nprocs = 2\n'
            'memory_mb = 2048\n\n')
    for name in CLUSTERS:
        text += (f'[rm.slurm{name.upper()}]\nkind = "slurm"\nslurm_conf = "{site[name].conf}"\n'
                 f'partition = "all"\noutput_dir = "{directory / "out"}"\n\n')
    path = directory / "bench-slurm.toml"
    path.write_text(text)
    return path


def stamp_of(path: Path, timeout: float = 30.0) -> float:
    """The time a job wrote into ``path`` (waits for it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            text = path.read_text().strip()
            if text:
                return float(text)
        except FileNotFoundError:
            pass
        time.sleep(0.005)
    raise TimeoutError(f"no stamp in {path} after {timeout} s")


#: How long an idle cluster is left before a timed submission, plus up to one Slurm
#: scheduling tick at random (see wait_idle).
SETTLE, TICK = 1.0, 1.0


def wait_idle(cluster: Any, timeout: float = 30.0) -> None:
    """Until the cluster runs nothing and every node is idle: each submission of (a)
    meets the same cluster (a job submitted while another ends is started by that
    end's scheduling pass, one on an idle cluster waits for the next tick)."""
    env, deadline = {**os.environ, **cluster.env()}, time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True,
                              text=True, check=True).stdout.split()
        states = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env=env, capture_output=True,
                                text=True, check=True).stdout.split()
        if not jobs and states and all(s == "idle" for s in states):
            # Slurm starts a job at once or at its next scheduling tick (up to ~1 s later)
            # depending on when it arrives; with a fixed pause the alternating bare and
            # grid submissions fall into fixed phases of that tick (seen: either side at
            # 0.05x).  A random pause gives both sides the same spread of phases.
            time.sleep(SETTLE + random.uniform(0.0, TICK))
            return
        time.sleep(0.05)
    raise TimeoutError(f"cluster {cluster.name} not idle after {timeout} s")


def bare_start(cluster: Any, client: Any, marks: Path, i: int) -> tuple[float, float]:
    """One bare sbatch: (submit -> running, estimate error), both in seconds."""
    wait_idle(cluster)
    estimate = client.estimate(1, 60).start.timestamp()
    mark = marks / f"bare-{i}"
    env = {**os.environ, **cluster.env()}
    t0 = time.time()
    subprocess.run(["sbatch", "--parsable", "--ntasks=1", "--time=1", "--partition=all",
                    "--output=/dev/null", f"--wrap={STAMP.format(file=mark)}"],
                   env=env, check=True, capture_output=True)
    started = stamp_of(mark)
    return started - t0, started - estimate


def grid_start(grid: Any, cluster: Any, marks: Path, i: int) -> tuple[float, float]:
    """One job through grid_tasks: (submit -> running, submit -> ACTIVE seen)."""
    from grid_tasks.states import JobState

    wait_idle(cluster)
    mark = marks / f"grid-{i}"
    rsl = (f'&(executable=/bin/sh)(arguments=-c "{STAMP.format(file=mark)}")'
           '(jobType=single)(count=1)')
    t0 = time.time()
    job = grid.submit(rsl, rm="slurmA")
    seen = None
    while seen is None:
        state = job.status().state
        if state in (JobState.ACTIVE, JobState.DONE):
            seen = time.time()
        elif state.terminal:
            raise RuntimeError(f"bench job {job.id} failed: {job.status()}")
        else:
            time.sleep(0.01)
    started = stamp_of(mark)
    job.wait(timeout=60)
    return started - t0, seen - t0


def coallocated(grid: Any, cluster: Any, marks: Path, prog: Path, i: int) -> tuple[float, float]:
    """One native+Slurm coallocated job: (submit -> released, release skew)."""
    wait_idle(cluster)
    files = [marks / f"co-{i}-n", marks / f"co-{i}-s"]
    rsl = "+" + "".join(
        f'(&(resourceManagerContact={rm})(label={label})(count=1)'
        f'(executable="{sys.executable}")(arguments="{prog}" "{f}")'
        f'(environment=(PYTHONPATH "{ROOT}")))'
        for rm, label, f in (("rmA", "n", files[0]), ("slurmA", "s", files[1])))
    t0 = time.time()
    job = grid.job_request(rsl, barrier_timeout=60)
    final = job.wait(timeout=60)
    if final.barrier != "released":
        raise RuntimeError(f"coallocated job {job.id} not released: {final}")
    stamps = [stamp_of(f) for f in files]
    return min(stamps) - t0, max(stamps) - min(stamps)


def stamps_of(path: Path, timeout: float = 30.0) -> tuple[float, float]:
    """(start, barrier return) a co-reserved job program wrote into ``path`` (waits)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        words = path.read_text().split() if path.exists() else []
        if len(words) == 2:
            return float(words[0]), float(words[1])
        time.sleep(0.005)
    raise TimeoutError(f"no stamps in {path} after {timeout} s")


def coreserved(grid: Any, broker: Any, site: Any, marks: Path, prog: Path, i: int,
               lead: float) -> tuple[float, float, float]:
    """One co-reserved job on clusters a and b: (start skew, latest start after the
    common start, release skew), in seconds.  Its co-reservation is released once the
    job ended (each RM frees it as the job ends, but asynchronously: the release makes
    sure a back-to-back run does not find each cluster's processors still claimed)."""
    for name in CLUSTERS:
        wait_idle(site[name])
    files = {name: marks / f"cr-{i}-{name}" for name in CLUSTERS}
    rsl = "+" + "".join(
        f'(&(resourceManagerContact=slurm{name.upper()})(label={name})(count=1)'
        f'(maxWallTime=1)(executable="{sys.executable}")(arguments="{prog}" "{f}")'
        f'(environment=(PYTHONPATH "{ROOT}")))' for name, f in files.items())
    job = grid.job_request(rsl, barrier_timeout=60, coreserve=True, lead=lead)
    common = job.coreservation.start
    final = job.wait(timeout=90)
    broker.release(job.coreservation)
    if final.barrier != "released":
        raise RuntimeError(f"co-reserved job {job.id} not released: {final}")
    (a_start, a_back), (b_start, b_back) = (stamps_of(f) for f in files.values())
    return abs(a_start - b_start), max(a_start, b_start) - common, abs(a_back - b_back)


def estimates(app: Any, clients: dict[str, Any], runs: int) -> dict[str, tuple[list, list]]:
    """Per cluster: (gatekeeper round trip, sbatch --test-only alone) in seconds."""
    from grid_tasks.broker.remote import RemoteRMs

    remote, out = RemoteRMs(app, timeout=10.0), {}
    for name, client in clients.items():
        rm, trips, alone = f"slurm{name.upper()}", [], []
        for _ in range(runs + 1):  # the first warms the gatekeeper up
            t0 = time.perf_counter()
            (outcome,) = remote.estimate([(rm, 1, 60.0, time.time())])
            trips.append(time.perf_counter() - t0)
            if not outcome.ok:
                raise RuntimeError(f"estimate on {rm} failed: {outcome.reason}")
            t0 = time.perf_counter()
            client.estimate(1, 60)
            alone.append(time.perf_counter() - t0)
        out[name] = (trips[1:], alone[1:])
    return out


def python_start() -> float:
    """The job program's own start: an interpreter importing the runtime library."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "from grid_tasks import runtime"], check=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    return time.perf_counter() - t0


def measure_starts(grid: Any, site: Any, clients: dict[str, Any], marks: Path, runs: int,
                   found: dict[str, Any]) -> None:
    """(a): bare sbatch and grid_tasks starts, alternating."""
    grid_start(grid, site["a"], marks, -1)  # warm-up: imports, connections, the follower
    for i in range(runs):
        bare, error = bare_start(site["a"], clients["a"], marks, i)
        found["bare"].append(bare)
        found["error"].append(error)
        started, active = grid_start(grid, site["a"], marks, i)
        found["grid"].append(started)
        found["active"].append(active)


def measure_coallocated(grid: Any, site: Any, marks: Path, prog: Path, runs: int,
                        found: dict[str, Any]) -> None:
    """(b): native + Slurm coallocated jobs."""
    coallocated(grid, site["a"], marks, prog, -1)
    for i in range(runs):
        co, skew = coallocated(grid, site["a"], marks, prog, i)
        found["co"].append(co)
        found["skew"].append(skew)
        found["python"].append(python_start())


def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from grid_tasks.broker.live import Broker
    from grid_tasks.celery_app import create_app
    from grid_tasks.client import Grid
    from grid_tasks.embedded.slurm_cluster import SlurmSite
    from grid_tasks.embedded.stack import EmbeddedStack, StackOptions
    from grid_tasks.security.roles import Role
    from grid_tasks.slurm.client import SlurmClient

    marks = tmp / "marks"
    marks.mkdir()
    (tmp / "out").mkdir()
    prog, coprog = tmp / "barrier.py", tmp / "coreserved.py"
    prog.write_text(BARRIER_PROGRAM)
    coprog.write_text(CORESERVED_PROGRAM)
    found: dict[str, Any] = {"bare": [], "error": [], "grid": [], "active": [], "co": [],
                             "skew": [], "python": [], "cr_skew": [], "cr_late": [],
                             "cr_release": []}
    with SlurmSite(tmp / "site", CLUSTERS) as site:
        stack = EmbeddedStack(StackOptions(topology_file=write_topology(tmp, site),
                                           state_dir=tmp / "grid", loglevel="WARNING",
                                           announce=False))
        settings = stack.start()
        clients = {n: SlurmClient(str(site[n].conf), "all") for n in CLUSTERS}
        try:
            grid = Grid(settings)
            app = create_app(settings.replace(signing=stack.signing_for(Role.SCHEDULER)))
            if "a" in args.only:
                measure_starts(grid, site, clients, marks, args.runs, found)
            if "b" in args.only:
                measure_coallocated(grid, site, marks, prog, args.runs, found)
            if "c" in args.only:
                with Broker.for_settings(settings, app) as broker:
                    for i in range(args.runs):
                        for key, value in zip(("cr_skew", "cr_late", "cr_release"), coreserved(
                                grid, broker, site, marks, coprog, i, args.lead)):
                            found[key].append(value)
            if "d" in args.only:
                found["estimates"] = estimates(app, clients, args.runs)
            grid.close()
            app.close()
        finally:
            stack.stop()
    return found


def report(found: dict[str, Any]) -> None:
    """Print every section measured (the others say so)."""
    ms = 1e3
    bare = statistics.median(found["bare"]) if found["bare"] else None
    if bare is not None:
        grid, active = statistics.median(found["grid"]), statistics.median(found["active"])
        print(f"(a) bare sbatch submit -> running p50 {bare * ms:.0f} ms, "
              f"p95 {percentile(found['bare'], 0.95) * ms:.0f} ms ({len(found['bare'])} runs)")
        print(f"    grid_tasks submit -> running p50 {grid * ms:.0f} ms, "
              f"p95 {percentile(found['grid'], 0.95) * ms:.0f} ms: ratio {grid / bare:.2f}x "
              "(target <= 1.2x)")
        mean_bare, mean_grid = statistics.fmean(found["bare"]), statistics.fmean(found["grid"])
        print(f"    means (Slurm's tick makes each start bimodal: at once or ~1 s later): bare "
              f"{mean_bare * ms:.0f} ms, grid_tasks {mean_grid * ms:.0f} ms: ratio "
              f"{mean_grid / mean_bare:.2f}x")
        print(f"    grid_tasks submit -> ACTIVE seen by the client p50 {active * ms:.0f} ms: "
              f"ratio {active / bare:.2f}x bare submit -> running")
    else:
        print("(a) not measured")
    report_coallocated(found, bare)
    report_coreserved(found)
    report_estimates(found)


def report_coallocated(found: dict[str, Any], bare: float | None) -> None:
    ms = 1e3
    if not found["co"]:
        print("(b) not measured")
        return
    co, py = statistics.median(found["co"]), statistics.median(found["python"])
    print(f"(b) coallocated native + Slurm submit -> released p50 {co * ms:.0f} ms, "
          f"p95 {percentile(found['co'], 0.95) * ms:.0f} ms ({len(found['co'])} jobs); "
          f"release skew p50 {statistics.median(found['skew']) * ms:.1f} ms")
    target = (f"target bare Slurm start + 0.5 s = {(bare + 0.5) * ms:.0f} ms: "
              f"{'met' if co <= bare + 0.5 else 'missed'} by {abs(bare + 0.5 - co) * ms:.0f} ms"
              if bare is not None else "target not judged ((a) not measured)")
    print(f"    {target}; the job program's Python start alone p50 {py * ms:.0f} ms")


def report_coreserved(found: dict[str, Any]) -> None:
    ms = 1e3
    skew, late, release = found["cr_skew"], found["cr_late"], found["cr_release"]
    if not skew:
        print("(c) not measured")
        return
    print(f"(c) co-reserved job on clusters a + b ({len(skew)} jobs): start skew p50 "
          f"{statistics.median(skew) * ms:.0f} ms, max {max(skew) * ms:.0f} ms "
          f"(bound: Slurm's 5 s reservation check; {'within' if max(skew) <= 5.0 else 'beyond'})")
    print(f"    latest subjob start after the common start p50 "
          f"{statistics.median(late) * ms:.0f} ms, max {max(late) * ms:.0f} ms")
    print(f"    barrier release skew p50 {statistics.median(release) * ms:.1f} ms, "
          f"max {max(release) * ms:.1f} ms (target 0)")


def report_estimates(found: dict[str, Any]) -> None:
    ms = 1e3
    if "estimates" not in found:
        print("(d) not measured")
        return
    for name, (trips, alone) in found["estimates"].items():
        print(f"(d) estimate on cluster {name}: via its gatekeeper p50 "
              f"{statistics.median(trips) * ms:.1f} ms, p95 {percentile(trips, 0.95) * ms:.1f} ms; "
              f"sbatch --test-only alone p50 {statistics.median(alone) * ms:.1f} ms "
              "(target < 50 ms)")
    errors = found["error"]
    if errors:
        print(f"    estimate error (real start - estimated start, estimates are whole "
              f"seconds): p50 {statistics.median(errors):+.2f} s, "
              f"max {max(errors, key=abs):+.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="jobs of each kind")
    parser.add_argument("--only", default="abcd", help="the sections to measure (e.g. c)")
    parser.add_argument("--lead", type=float, default=3.0,
                        help="(c): the common start this many seconds after the request")
    args = parser.parse_args()
    from grid_tasks.embedded.slurm_cluster import missing_binaries

    missing = missing_binaries()
    if missing or os.geteuid() != 0:
        sys.exit(f"bench_slurm needs root and Slurm/munge (missing: {', '.join(missing) or '-'})")
    with tempfile.TemporaryDirectory() as tmp:
        found = run(args, Path(tmp))
    report(found)


if __name__ == "__main__":
    main()
