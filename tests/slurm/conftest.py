"""A live grid whose one resource manager is a private Slurm cluster (package-scoped).

Real parts: one :class:`SlurmSite` cluster (munged, slurmctld, two slurmd), a private
redis-server, the Slurm RM's gatekeeper as a ``grid-tasks worker --rm slurm1``
subprocess holding the scheduler key and a grid map that maps the user alice to a
throwaway unprivileged account, and a client signing as alice.  Jobs are real sbatch
jobs run as that account; their streams go to a folder under the system's temporary
directory (the account must reach it: pytest's own folders are private).
Tests must leave the grid idle (every job ended).
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from grid_tasks.embedded.redis_server import RedisServer
from grid_tasks.embedded.slurm_cluster import SlurmCluster, SlurmSite
from grid_tasks.security.config import SigningSettings
from grid_tasks.security.role_keys import ensure_grid_keys, subject_of
from grid_tasks.security.roles import Role
from grid_tasks.settings import Settings
from tests.conftest import made_user
from tests.gram.conftest import grid_settings
from tests.slurm_site import skip_reason

RM = "slurm1"
GONE = "gone"  # a Slurm RM whose controller is down (no gatekeeper runs for it)
ALICE = subject_of(Role.USER, "alice")


@dataclass
class SlurmGrid:
    """Handles of the running Slurm grid."""

    settings: Settings  # the grid's (the gatekeeper's, without its key)
    cluster: SlurmCluster
    account: Any  # pwd entry of the account alice maps to
    output_dir: Path
    client: Any  # a Grid signing as alice (one signing key per process at a time)
    signing: SigningSettings  # alice's

    def env(self) -> dict[str, str]:
        """GRID_TASKS_* of a command alice runs on this grid."""
        return self.settings.replace(signing=self.signing, gridmap_file=None).to_env()


@pytest.fixture(scope="package")
def slurm_grid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmGrid]:
    reason = skip_reason(need_useradd=True)
    if reason:
        pytest.skip(reason)
    from grid_tasks import db
    from grid_tasks.client import Grid
    from grid_tasks.embedded.stack import grid_tasks_command, prepare_database
    from grid_tasks.embedded.supervisor import Supervisor, leftover
    from grid_tasks.topology import load_topology

    base = tmp_path_factory.mktemp("slurmgrid")
    with ExitStack() as stack:
        site = stack.enter_context(SlurmSite(base / "site", {"g": 2}))
        account = stack.enter_context(contextmanager(made_user)())
        redis_server = RedisServer(base / "redis")
        redis_server.start()
        stack.callback(redis_server.stop)
        out = Path(tempfile.mkdtemp(prefix="grid-tasks-slurm-out-"))
        stack.callback(shutil.rmtree, out, True)
        topology = base / "grid.toml"
        gone = base / "gone.conf"  # a cluster whose controller never answers
        gone.write_text("ClusterName=gone\nSlurmctldHost=localhost\nSlurmctldPort=1\n"
                        "MessageTimeout=2\nNodeName=g1 CPUs=1\nPartitionName=all Nodes=g1\n")
        topology.write_text(f'[rm.{RM}]\nkind = "slurm"\nslurm_conf = "{site["g"].conf}"\n'
                            f'partition = "all"\noutput_dir = "{out}"\n\n'
                            f'[rm.{GONE}]\nkind = "slurm"\nslurm_conf = "{gone}"\n'
                            f'output_dir = "{out}"\n')
        gridmap = base / "grid-mapfile"
        gridmap.write_text(f'"{ALICE}" {account.pw_name}\n')
        settings = grid_settings(redis_server, base / "state").replace(
            topology_file=topology, gridmap_file=gridmap, single_user=False)
        assert prepare_database(settings, load_topology(topology))
        keys = ensure_grid_keys(base / "keys", "alice", now=dt.datetime.now(dt.timezone.utc))
        env = {k: v for k, v in os.environ.items() if not k.startswith("GRID_TASKS_")}
        env.update(settings.replace(signing=keys.signing(Role.SCHEDULER)).to_env())
        supervisor = Supervisor(base / "logs")
        supervisor.spawn("gatekeeper", grid_tasks_command(
            "worker", "--rm", RM, "--no-check", "-l", "WARNING"), env=env)
        pids = supervisor.all_pids()
        stack.callback(lambda: leftover(pids) == [] or pytest.fail("gatekeeper survived"))
        stack.callback(db.dispose_engines)
        stack.callback(supervisor.stop_all, timeout=10)
        user = SigningSettings(True, keys.user.key, keys.user.cert, keys.user.cert_store)
        client = stack.enter_context(Grid(settings.replace(signing=user, gridmap_file=None)))
        yield SlurmGrid(settings, site["g"], account, out, client, user)
