"""DUROC across both kinds of RM: one subjob on a native RM, one on a private Slurm cluster.

Real parts: a SlurmSite (munged, slurmctld, two slurmd), a redis-server, the scheduler
worker, one gatekeeper per RM and a node daemon for the native RM as subprocesses.  The
Slurm subjob's processes are srun tasks; they find the coordination store through the
runtime library exactly as native ones (rank from srun's ``SLURM_PROCID``), and the
barrier, the strict failure and the cancel (``scancel``) hold across the two kinds.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from grid_tasks.embedded.redis_server import RedisServer
from grid_tasks.embedded.slurm_cluster import SlurmSite
from grid_tasks.settings import default_config_file
from grid_tasks.states import JobState
from tests.duroc.live import markers
from tests.gram.conftest import LiveGrid, grid_settings
from tests.slurm_site import NEEDS_SLURM
from tests.waiting import until

pytestmark = NEEDS_SLURM

ROOT = Path(__file__).resolve().parents[2]
SLURM_RM = "slurm1"

# Enters the barrier, then leaves a marker per rank; "leak" also looks for the runtime
# URL's password on any process's command line (it must travel in the environment only).
PROGRAM = """
import os, sys, pathlib, time
from grid_tasks import runtime
out, mode = pathlib.Path(sys.argv[1]), sys.argv[2]
if mode.startswith("pre"):
    time.sleep(float(mode[3:]))
secret = os.environ["GRID_TASKS_RUNTIME_URL"].split("@")[0].rsplit(":", 1)[-1].encode()
leaks = []
for cmdline in pathlib.Path("/proc").glob("[0-9]*/cmdline"):
    try:
        if secret in cmdline.read_bytes():
            leaks.append(cmdline.parent.name)
    except OSError:
        pass
runtime.barrier()
label, rank = os.environ["GRID_TASKS_SUBJOB_LABEL"], runtime.intra_subjob_rank()
(out / f"{label}-{rank}").write_text(",".join(leaks) or "clean")
"""


def mixed_topology(directory: Path, slurm_conf: Path, output_dir: Path) -> Path:
    """rmA (native, one node) and a Slurm RM on ``slurm_conf``."""
    policy = default_config_file("demo.cfg").resolve()
    path = directory / "mixed.toml"
    path.write_text(
        f'[rm.rmA]\npolicy_file = "{policy}"\n\n[rm.rmA.node.node1]\nprocs = 2\n'
        f'memory_mb = 2048\ndisk_mb = 10000\nswap_mb = 512\narch = "x86_64"\nos = "linux"\n\n'
        f'[rm.{SLURM_RM}]\nkind = "slurm"\nslurm_conf = "{slurm_conf}"\npartition = "all"\n'
        f'output_dir = "{output_dir}"\n')
    return path


@pytest.fixture(scope="module")
def mixed_grid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveGrid]:
    from grid_tasks import db
    from grid_tasks.client import Grid
    from grid_tasks.embedded.stack import grid_tasks_command, prepare_database
    from grid_tasks.embedded.supervisor import Supervisor, leftover
    from grid_tasks.topology import load_topology

    base = tmp_path_factory.mktemp("mixed")
    with ExitStack() as stack:
        site = stack.enter_context(SlurmSite(base / "site", {"m": 2}))
        server = RedisServer(base / "redis")
        server.start()
        stack.callback(server.stop)
        out = Path(tempfile.mkdtemp(prefix="grid-tasks-mixed-out-"))
        stack.callback(shutil.rmtree, out, True)
        settings = grid_settings(server, base / "state").replace(
            topology_file=mixed_topology(base, site["m"].conf, out))
        assert prepare_database(settings, load_topology(settings.topology_file))
        env = {k: v for k, v in os.environ.items() if not k.startswith("GRID_TASKS_")}
        env.update(settings.to_env())
        env.update({"GRID_TASKS_LAUNCH_TIMEOUT": "5", "PYTHONUNBUFFERED": "1"})
        supervisor = Supervisor(base / "logs")
        grid = Grid(settings)
        stack.callback(db.dispose_engines)
        stack.callback(grid.close)
        pids: list[int] = []
        stack.callback(lambda: leftover(pids) == [] or pytest.fail("workers survived"))
        stack.callback(supervisor.stop_all, timeout=10)
        # the scheduler's host has no working Slurm commands: what reaches Slurm goes
        # through the Slurm RM's gatekeeper (a stub run here leaves a line in the log)
        no_slurm = no_slurm_commands(base / "no-slurm")
        supervisor.spawn("scheduler", grid_tasks_command(
            "worker", "--scheduler", "--no-check", "-l", "WARNING", "-c", "2"),
            env={**env, "PATH": f"{no_slurm}:{env.get('PATH', '/usr/bin:/bin')}"})
        for rm in ("rmA", SLURM_RM):
            supervisor.spawn(f"gatekeeper-{rm}", grid_tasks_command(
                "worker", "--rm", rm, "--no-check", "-l", "WARNING", "-c", "4"), env=env)
        live = LiveGrid(settings, grid, {}, supervisor, env)
        live.slurm_run_by_scheduler = no_slurm / "ran.log"  # type: ignore[attr-defined]
        live.start_node("rmA", "node1")
        pids.extend(supervisor.all_pids())
        yield live
        import gc

        gc.collect()  # Celery result objects unsubscribe while the grid's Redis is up


def no_slurm_commands(folder: Path) -> Path:
    """A folder of stand-ins for Slurm's client commands that refuse and log each call
    (first on a PATH, they shadow the real ones)."""
    folder.mkdir()
    for command in ("sbatch", "scancel", "squeue", "scontrol", "sinfo", "sacct"):
        stub = folder / command
        stub.write_text(f'#!/bin/sh\necho "{command} $*" >> "{folder}/ran.log"\n'
                        f'echo "{command}: Slurm is not installed on this host" >&2\nexit 1\n')
        stub.chmod(0o755)
    return folder


@pytest.fixture
def out(tmp_path: Path) -> Path:
    d = tmp_path / "markers"
    d.mkdir()
    return d


def component(rm: str, label: str, count: int, prog: Path, out: Path, mode: str = "plain",
              executable: str | None = None, start: str | None = None) -> str:
    """One subjob (``start``: its subjobStartType); the checkout's package first on the
    path (a Slurm job's environment is the job manager's, not the gatekeeper's)."""
    run = f'(executable="{executable}")' if executable else (
        f'(executable="{sys.executable}")(arguments="{prog}" "{out}" "{mode}")')
    if start:
        run += f"(subjobStartType={start})"
        if start == "no-barrier":
            run += "(subjobCommsType=independent)"
    return (f'(&(resourceManagerContact={rm})(label={label})(count={count}){run}'
            f'(environment=(PYTHONPATH "{ROOT}")))')


def program(tmp: Path) -> Path:
    path = tmp / "mixed_program.py"
    path.write_text(PROGRAM)
    return path


def test_native_and_slurm_subjobs_meet_at_one_barrier(mixed_grid, tmp_path, out):
    grid, prog = mixed_grid.grid, program(tmp_path)
    rsl = "+" + component("rmA", "native", 1, prog, out, "leak") + \
        component(SLURM_RM, "slurm", 2, prog, out, "leak")
    final = grid.job_request(rsl, barrier_timeout=60).wait(timeout=60)
    assert final.state is JobState.DONE, final
    assert final.barrier == "released"
    assert markers(out) == ["native-0", "slurm-0", "slurm-1"]  # srun's two tasks, ranked
    assert {(out / m).read_text() for m in markers(out)} == {"clean"}  # no URL in any argv
    gram = grid.status(final.subjob("slurm").gram_job)
    assert gram.rm == SLURM_RM and gram.state is JobState.DONE


def test_single_subjobs_holding_two_processors_release_the_barrier(mixed_grid, tmp_path, out):
    """jobType single, count 2, on both kinds: one process each, so the barrier opens."""
    grid, prog = mixed_grid.grid, program(tmp_path)
    rsl = "+" + "".join(component(rm, label, 2, prog, out).replace(
        "(count=2)", "(count=2)(jobType=single)") for rm, label in (("rmA", "native"),
                                                                     (SLURM_RM, "slurm")))
    final = grid.job_request(rsl, barrier_timeout=40).wait(timeout=50)
    assert final.state is JobState.DONE and final.barrier == "released", final
    assert markers(out) == ["native-0", "slurm-0"]


def test_a_slurm_subjob_failing_before_the_barrier_fails_the_job(mixed_grid, tmp_path, out):
    grid, prog = mixed_grid.grid, program(tmp_path)
    rsl = "+" + component("rmA", "waits", 1, prog, out) + \
        component(SLURM_RM, "dies", 1, prog, out, executable="/bin/false")
    final = grid.job_request(rsl, barrier_timeout=60).wait(timeout=60)
    assert final.state is JobState.FAILED, final
    assert "'dies'" in final.reason and "before the barrier" in final.reason, final.reason
    assert final.barrier == "failed"
    assert markers(out) == []  # nobody ran past the barrier
    until(lambda: grid.status(final.subjob("waits").gram_job).state.terminal, 30,
          "the native subjob ended")


def test_cancel_stops_the_slurm_subjob_through_its_gatekeeper(mixed_grid, tmp_path, out):
    grid, prog = mixed_grid.grid, program(tmp_path)
    rsl = "+" + component("rmA", "early", 1, prog, out) + \
        component(SLURM_RM, "late", 1, prog, out, "pre60")  # not at the barrier for a minute
    job = grid.job_request(rsl, barrier_timeout=90)
    until(lambda: job.status().subjob("late").gram_job is not None and grid.status(
        job.status().subjob("late").gram_job).state is JobState.ACTIVE, 30,
          "the Slurm subjob running")
    began = time.monotonic()
    job.cancel()
    final = job.wait(timeout=30)
    assert final.state is JobState.FAILED and "cancel" in final.reason, final
    late = final.subjob("late").gram_job
    until(lambda: grid.status(late).state.terminal, 20, "the Slurm subjob ended")
    assert time.monotonic() - began < 20  # scancel'd, not left to its minute of sleep
    assert markers(out) == []
    ended = grid.status(late)
    assert ended.state is JobState.FAILED and "cancelled by user" in ended.reason, ended
    # the scancel ran at the Slurm RM's gatekeeper, not at the scheduler (no Slurm there)
    assert not mixed_grid.slurm_run_by_scheduler.exists(), \
        mixed_grid.slurm_run_by_scheduler.read_text()


def test_loose_and_no_barrier_slurm_subjobs_do_not_sink_the_job(mixed_grid, tmp_path, out):
    grid, prog = mixed_grid.grid, program(tmp_path)
    rsl = "+" + component("rmA", "strict", 1, prog, out) + \
        component(SLURM_RM, "loose", 1, prog, out, executable="/bin/false",
                  start="loose-barrier") + \
        component(SLURM_RM, "free", 1, prog, out, start="no-barrier")
    final = grid.job_request(rsl, barrier_timeout=60).wait(timeout=60)
    assert final.state is JobState.DONE, final
    assert final.barrier == "released"
    # the loose Slurm subjob died before the barrier and left it; the others passed it
    assert markers(out) == ["free-0", "strict-0"]
    loose, free = final.subjob("loose"), final.subjob("free")
    assert loose.state is JobState.FAILED and loose.exit_code == 1, loose  # Slurm's exit code
    assert free.state is JobState.DONE and free.exit_code == 0, free


def test_slurm_subjobs_added_and_deleted_before_release(mixed_grid, tmp_path, out):
    from grid_tasks.duroc.errors import CoallocFinishedError

    grid, prog = mixed_grid.grid, program(tmp_path)
    # 'gone' would hold the barrier for a minute; deleting it lets the rest through
    rsl = "+" + component("rmA", "keep", 1, prog, out, "pre3") + \
        component(SLURM_RM, "gone", 1, prog, out, "pre60")
    job = grid.job_request(rsl, barrier_timeout=60)
    assert job.add("+" + component(SLURM_RM, "added", 1, prog, out)) == ["added"]
    until(lambda: job.status().subjob("gone").gram_job is not None, 30, "'gone' submitted")
    gone = job.status().subjob("gone").gram_job
    status = job.delete("gone")
    assert sorted(s.label for s in status.subjobs) == ["added", "keep"]
    final = job.wait(timeout=40)
    assert final.state is JobState.DONE and final.barrier == "released", final
    assert markers(out) == ["added-0", "keep-0"]
    assert grid.status(final.subjob("added").gram_job).rm == SLURM_RM
    until(lambda: grid.status(gone).state.terminal, 20, "the deleted Slurm subjob ended")
    assert "cancelled" in (grid.status(gone).reason or ""), grid.status(gone)
    with pytest.raises(CoallocFinishedError, match="DONE"):
        job.delete("added")
    assert not mixed_grid.slurm_run_by_scheduler.exists()
