"""`grid-tasks up` on a topology with a Slurm cluster: its gatekeeper (which follows its
jobs) is started like any RM's, no node daemon, and the database lists it without nodes."""

from __future__ import annotations

from pathlib import Path

from grid_tasks import db
from grid_tasks.embedded.stack import EmbeddedStack, StackOptions, prepare_database
from grid_tasks.settings import Settings
from grid_tasks.topology import load_topology
from tests.conftest import CONFIG_DIR


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
