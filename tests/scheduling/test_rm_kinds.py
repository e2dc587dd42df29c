"""The one RM interface: each RM's implementation chosen from its topology kind, the
topology read again only when it changed, and calls an RM kind does not answer refused
with a typed error naming the RM."""

from __future__ import annotations

import os

import pytest

from grid_tasks.legion.refusals import ReservationRefused
from grid_tasks.scheduling.native_rm import NativeRM
from grid_tasks.scheduling.rm_backend import NotOnThisRM
from grid_tasks.scheduling.rm_kinds import backend_for, topology_of
from grid_tasks.scheduling.slurm_rm import DEFAULT_PARTITION, SlurmRM
from grid_tasks.topology import RMKind

TOPOLOGY = ('[rm.rmA]\n[rm.rmA.node.node1]\nprocs = 2\n'
            '[rm.rmS]\nkind = "slurm"\nslurm_conf = "/etc/slurm/s.conf"\npartition = "all"\n'
            '[rm.rmT]\nkind = "slurm"\nslurm_conf = "t.conf"\n')


@pytest.fixture
def topo_file(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text(TOPOLOGY)
    return path


def test_each_rm_gets_the_implementation_of_its_kind(topo_file):
    topology = topology_of(topo_file)
    native, slurm, default = (backend_for(rm, topology, registry="reg")
                              for rm in ("rmA", "rmS", "rmT"))
    assert isinstance(native, NativeRM) and native.kind is RMKind.MAUI
    assert native.registry == "reg"
    assert isinstance(slurm, SlurmRM) and slurm.kind is RMKind.SLURM
    assert (slurm.rm, slurm.client.conf, slurm.key) == ("rmS", "/etc/slurm/s.conf", "all")
    assert default.key == DEFAULT_PARTITION  # no partition: Slurm's default one
    assert default.client.conf == str(topo_file.parent / "t.conf")


def test_an_rm_the_topology_does_not_name_is_native(topo_file):
    assert isinstance(backend_for("rmZ", topology_of(topo_file)), NativeRM)
    assert isinstance(backend_for("rmS", None), NativeRM)


def test_the_topology_is_read_again_only_when_it_changed(topo_file, tmp_path):
    first = topology_of(topo_file)
    assert topology_of(topo_file) is first
    topo_file.write_text('[rm.rmS]\nkind = "slurm"\nslurm_conf = "/x.conf"\n')
    os.utime(topo_file, (1, 1))  # another mtime, whatever the clock's resolution
    again = topology_of(topo_file)
    assert again is not first and list(again.rms) == ["rmS"]
    assert topology_of(tmp_path / "missing.toml") is None
    (tmp_path / "bad.toml").write_text("[rm.x]\nkind = 3\n")
    assert topology_of(tmp_path / "bad.toml") is None  # logged; every RM served natively


def test_a_native_rm_refuses_the_job_calls_with_a_typed_error(topo_file):
    native = backend_for("rmA", topology_of(topo_file))
    for call in (lambda: native.submit(object()), lambda: native.cancel("1"),
                 lambda: native.states(["1"])):
        with pytest.raises(NotOnThisRM, match="rmA .maui.: its jobs go through their GRAM"):
            call()


def test_a_slurm_rm_is_reserved_as_its_partition(topo_file):
    slurm = backend_for("rmS", topology_of(topo_file))
    with pytest.raises(ReservationRefused) as err:
        slurm.reserve(None, name="g", allocation={"node1": 2}, start=10.0, duration=60.0,
                      token="t", job_key="k", now=0.0)
    assert err.value.reason == "bad_request" and "{'all': procs}" in str(err.value)


def test_an_unreadable_topology_is_native_and_logged_once(tmp_path, caplog):
    broken = tmp_path / "broken.toml"
    broken.write_text("[rm.a\n")
    with caplog.at_level("WARNING", logger="grid_tasks.scheduling.rm_kinds"):
        assert topology_of(broken) is None and topology_of(broken) is None
    assert sum("unreadable" in r.getMessage() for r in caplog.records) == 1
