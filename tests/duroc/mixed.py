"""A live grid of two kinds of RM for DUROC and broker tests: native rmA (one node of 2
processors) and a private Slurm cluster (two slurmd of 2 CPUs) as ``slurm1``.

Real parts: a SlurmSite (munged, slurmctld, slurmd), a redis-server, the scheduler
worker, one gatekeeper per RM (the Slurm one follows its jobs) and a node daemon for
the native RM, as subprocesses.  The scheduler either has no working Slurm commands
(what reaches Slurm must go through the Slurm RM's gatekeeper: a stub run there leaves
a line in ``slurm_run_by_scheduler``) or has them (it answers the broker's estimate,
reserve and prune for the Slurm RM, as the embedded stack's does).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from grid_tasks.embedded.redis_server import RedisServer
from grid_tasks.embedded.slurm_cluster import SlurmSite
from grid_tasks.settings import default_config_file
from tests.gram.conftest import LiveGrid, grid_settings

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


def mixed_grid_of(tmp_path_factory: pytest.TempPathFactory, *,
                  scheduler_slurm: bool = False) -> Iterator[LiveGrid]:
    """The grid (see the module docstring); ``scheduler_slurm``: the scheduler may run
    Slurm's commands.  Its ``slurm_cluster`` is the Slurm RM's cluster; ``gatekeeper``
    (the Slurm RM's) can be stopped and started again with :func:`restart_gatekeeper`."""
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
        path = env.get("PATH", "/usr/bin:/bin")
        supervisor.spawn("scheduler", grid_tasks_command(
            "worker", "--scheduler", "--no-check", "-l", "WARNING", "-c", "2"),
            env={**env, "PATH": path if scheduler_slurm else f"{no_slurm}:{path}"})
        children = {rm: supervisor.spawn(f"gatekeeper-{rm}", grid_tasks_command(
            "worker", "--rm", rm, "--no-check", "-l", "WARNING", "-c", "4"), env=env)
            for rm in ("rmA", SLURM_RM)}
        live = LiveGrid(settings, grid, {}, supervisor, env)
        live.slurm_run_by_scheduler = no_slurm / "ran.log"  # type: ignore[attr-defined]
        live.slurm_cluster = site["m"]  # type: ignore[attr-defined]
        live.gatekeeper = children[SLURM_RM]  # type: ignore[attr-defined]
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


def stop_gatekeeper(live: Any) -> None:
    """Stop the Slurm RM's gatekeeper worker (SIGTERM: its follower lets go of its lease)."""
    live.supervisor.stop(live.gatekeeper)


def start_gatekeeper(live: Any) -> None:
    """Start the Slurm RM's gatekeeper again, as it was started first."""
    old = live.gatekeeper
    live.gatekeeper = live.supervisor.spawn(f"{old.name}-again", old.argv, env=old.env)
