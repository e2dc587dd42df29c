"""`grid-tasks up` on a topology with a Slurm cluster: its gatekeeper (which follows its
jobs) is started like any RM's, no node daemon, and the database lists it without nodes;
`grid-tasks up --slurm` runs a private cluster as RM slurm1, or says why it cannot."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from grid_tasks import db
from grid_tasks.client import Grid
from grid_tasks.embedded.demo_slurm import RUNNING_NOTE, SLURM_RM, SlurmNotRunnable
from grid_tasks.embedded.stack import EmbeddedStack, StackOptions, prepare_database
from grid_tasks.settings import Settings
from grid_tasks.states import JobState
from grid_tasks.topology import load_topology
from tests.conftest import CONFIG_DIR
from tests.slurm_site import skip_reason


def topology(tmp_path: Path) -> Path:
    path = tmp_path / "grid.toml"
    path.write_text(f'[rm.rmA]\npolicy_file = "{CONFIG_DIR / "demo.cfg"}"\n'
                    '[rm.rmA.node.node1]\nprocs = 2\n\n'
                    '[rm.sl]\nkind = "slurm"\nslurm_conf = "/etc/slurm/slurm.conf"\n')
    return path


def test_a_slurm_rm_gets_a_gatekeeper_and_no_node_daemon(tmp_path):
    stack = EmbeddedStack(StackOptions(topology_file=topology(tmp_path),
                                       state_dir=tmp_path / "s"))
    spawned: list[tuple[str, list[str]]] = []
    stack.supervisor.spawn = lambda name, argv, **_: spawned.append((name, argv))
    stack.settings = Settings(state_dir=tmp_path / "s")
    stack._spawn_workers()
    names = [name for name, _ in spawned]
    assert "gatekeeper-sl" in names and "node-rmA-node1" in names
    assert not [n for n in names if n.startswith("node-sl")]
    argv = dict(spawned)["gatekeeper-sl"]
    assert argv[argv.index("--rm") + 1] == "sl" and "--node" not in argv


def test_the_database_lists_a_slurm_rm_without_nodes(tmp_path):
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'g.db'}", state_dir=tmp_path)
    assert prepare_database(settings, load_topology(topology(tmp_path)))
    with db.session_scope(db.session_factory(db.get_engine(settings.database_url))) as session:
        rms = {rm.name: [n.name for n in rm.nodes] for rm in db.repository.list_rms(session)}
    db.dispose_engines(settings.database_url)
    assert rms == {"rmA": ["node1"], "sl": []}


# --- `grid-tasks up --slurm`: a private Slurm cluster that must run -------------------


def test_up_slurm_without_slurm_installed_is_refused_before_anything_starts(tmp_path,
                                                                          monkeypatch):
    from grid_tasks.embedded import demo_slurm

    monkeypatch.setattr(demo_slurm, "missing_binaries", lambda: ["slurmctld", "munged"])
    state = tmp_path / "s"
    stack = EmbeddedStack(StackOptions(topology_file=topology(tmp_path), state_dir=state,
                                       slurm=True, slurm_required=True, announce=False))
    with pytest.raises(SlurmNotRunnable) as caught:
        stack.start()
    assert str(caught.value) == ("grid-tasks up --slurm: no local Slurm cluster: Slurm is "
                                 "not installed (no slurmctld, munged)")
    assert stack.supervisor.children == [] and stack.redis.pid is None
    assert not (state / "slurm").exists() and not (state / "stack.env").exists()


@pytest.mark.slow
@pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")
@pytest.mark.timeout(120)
def test_up_slurm_runs_a_cluster_whose_rm_takes_jobs_and_stops_with_the_grid(tmp_path):
    small = tmp_path / "small.toml"
    small.write_text(f'[rm.rmA]\npolicy_file = "{CONFIG_DIR / "demo.cfg"}"\n'
                     '[rm.rmA.node.node1]\nprocs = 2\n')
    state = tmp_path / "s"
    stack = EmbeddedStack(StackOptions(topology_file=small, state_dir=state, slurm=True,
                                       slurm_required=True, announce=False,
                                       loglevel="WARNING", start_timeout=90))
    with stack:
        assert set(stack.topology.rms) == {"rmA", SLURM_RM}
        assert stack.slurm_note == RUNNING_NOTE
        with Grid(stack.settings) as grid:
            done = grid.submit("&(executable=/bin/true)(jobType=single)", SLURM_RM,
                               user="demo").wait(timeout=60)
        assert done.state is JobState.DONE, done
        daemons = _slurm_daemons(state)
        assert daemons, "no slurmctld/slurmd of the stack's cluster found"
    assert [p for p in daemons if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []
    assert _slurm_daemons(state) == []


def _slurm_daemons(state: Path) -> list[psutil.Process]:
    """The Slurm and munge daemons whose command line or configuration is under ``state``."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        try:
            if proc.info["name"] not in ("slurmctld", "slurmd", "munged"):
                continue
            where = " ".join(proc.info["cmdline"] or ()) + proc.environ().get("SLURM_CONF", "")
            if str(state.resolve()) in where:
                found.append(proc)
        except psutil.Error:
            continue
    return found
