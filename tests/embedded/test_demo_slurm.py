"""The demo's optional Slurm cluster: the topology that adds it, and the one line that
says why it is left out (the live demo with it: tests/cli/test_stack_cli.py)."""

from __future__ import annotations

import pytest

from grid_tasks.embedded import demo_slurm
from grid_tasks.embedded.demo_slurm import SLURM_RM, start_demo_slurm, with_slurm_rm
from grid_tasks.topology import RMKind, load_topology
from tests.conftest import DEMO_TOPOLOGY


def test_the_demo_topology_gains_the_slurm_rm_and_keeps_its_policies(tmp_path):
    derived = with_slurm_rm(DEMO_TOPOLOGY, tmp_path / "grid.toml", tmp_path / "slurm.conf",
                            tmp_path / "out")
    topology, original = load_topology(derived), load_topology(DEMO_TOPOLOGY)
    assert set(topology.rms) == set(original.rms) | {SLURM_RM}
    spec = topology.rms[SLURM_RM]
    assert spec.kind is RMKind.SLURM and spec.slurm is not None
    assert spec.slurm.slurm_conf == tmp_path / "slurm.conf" and spec.slurm.partition == "all"
    for name, rm in original.rms.items():  # relative policy files still found from here
        assert topology.rms[name].policy_file == rm.policy_file.resolve()
        assert [n.name for n in topology.rms[name].nodes] == [n.name for n in rm.nodes]
    topology.check_policy_files()


@pytest.mark.parametrize("missing,root,why", [
    (["slurmctld", "munged"], True, "Slurm is not installed (no slurmctld, munged)"),
    ([], False, "slurmd must run as root to start jobs"),
])
def test_without_slurm_the_demo_says_why_in_one_line(tmp_path, monkeypatch, missing, root, why):
    monkeypatch.setattr(demo_slurm, "missing_binaries", lambda: missing)
    monkeypatch.setattr(demo_slurm.os, "geteuid", lambda: 0 if root else 1000)
    site, note = start_demo_slurm(tmp_path, DEMO_TOPOLOGY)
    assert site is None
    assert note == f"no Slurm cluster in this demo: {why}"
    assert list(tmp_path.iterdir()) == []  # nothing started, nothing written
