"""Topology sync into SQL and node heartbeats."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from grid_tasks.db import RecordError, get_node, record_node_seen, repository, sync_topology
from grid_tasks.errors import NotFoundError
from grid_tasks.states import NodeState
from grid_tasks.topology import load_topology, parse_topology

from .conftest import GRID_TOML, T0

REPO = Path(__file__).resolve().parents[2]


def test_sync_adds_everything_once_then_nothing(session: Session, topology) -> None:
    first = sync_topology(session, topology)
    assert first.added_rms == ["rmA", "rmB"]
    assert first.added_nodes == ["rmA/a1", "rmA/a2", "rmB/b1"]
    again = sync_topology(session, topology)
    assert (again.added_rms, again.added_nodes, again.updated_nodes, again.removed_nodes) == (
        [], [], [], [])
    assert [(n.rm, n.name) for n in repository.list_nodes(session)] == [
        ("rmA", "a1"), ("rmA", "a2"), ("rmB", "b1")]


def test_a_new_grid_is_one_insert_of_its_nodes_per_rm_whatever_their_number(
        session: Session) -> None:
    """Preparing a grid's database costs no statement per node (issue 25): the nodes of
    an RM are one bulk INSERT, and the session sees them right after."""
    from sqlalchemy import event

    big = "".join(f"[rm.big.node.n{i}]\nprocs = 2\nfeatures = [\"f{i}\"]\n" for i in range(200))
    statements: list[str] = []
    engine = session.get_bind()
    listen = lambda *args: statements.append(args[2].split()[0])  # noqa: E731
    event.listen(engine, "before_cursor_execute", listen)
    try:
        report = sync_topology(session, parse_topology(big, "grid.toml"))
    finally:
        event.remove(engine, "before_cursor_execute", listen)
    assert len(report.added_nodes) == 200
    assert statements.count("INSERT") <= 2, statements  # the RM, then its nodes
    assert len(statements) < 10, statements
    nodes = repository.get_rm(session, "big").nodes
    assert len(nodes) == 200 and {n.state for n in nodes} == {NodeState.UNKNOWN}
    assert get_node(session, "big", "n7").features == ["f7"] and nodes[0].procs == 2


def test_sync_updates_changed_and_removes_unconfigured_nodes(grid: Session) -> None:
    changed = GRID_TOML.replace("procs = 2\n", "procs = 6\n").replace(
        "[rm.rmB.node.b1]", "[rm.rmB.node.b2]")
    report = sync_topology(grid, parse_topology(changed, "grid.toml"))
    grid.commit()
    assert report.updated_nodes == ["rmA/a2"]
    assert report.added_nodes == ["rmB/b2"]
    assert report.removed_nodes == ["rmB/b1"]
    assert get_node(grid, "rmA", "a2").procs == 6
    with pytest.raises(NotFoundError, match="unknown node 'b1' in resource manager 'rmB'"):
        get_node(grid, "rmB", "b1")


def test_rms_dropped_from_the_topology_are_kept_and_reported(grid: Session) -> None:
    only_a = GRID_TOML[: GRID_TOML.index("[rm.rmB")]
    report = sync_topology(grid, parse_topology(only_a, "grid.toml"))
    assert report.stale_rms == ["rmB"]
    assert repository.get_rm(grid, "rmB").name == "rmB"


def test_sync_of_the_shipped_demo_grid(session: Session) -> None:
    topo = load_topology(REPO / "config" / "demo-grid.toml")
    report = sync_topology(session, topo)
    expected = [f"{n.rm}/{n.name}" for n in topo.iter_nodes()]
    assert report.added_nodes == expected and len(expected) == 4


def test_heartbeat_registers_revives_and_never_goes_back_in_time(grid: Session) -> None:
    assert get_node(grid, "rmA", "a1").state is NodeState.UNKNOWN
    node = record_node_seen(grid, "rmA", "a1", {"procs": 3, "memory_mb": 3000}, T0)
    assert (node.state, node.procs, node.memory_mb, node.disk_mb) == (
        NodeState.IDLE, 3, 3000, 20000)
    assert node.registered_at == T0 and node.last_seen == T0
    record_node_seen(grid, "rmA", "a1", {}, T0 + timedelta(seconds=10))
    record_node_seen(grid, "rmA", "a1", {}, T0 + timedelta(seconds=5))  # late, reordered
    grid.commit()
    grid.expunge_all()
    node = get_node(grid, "rmA", "a1")
    assert node.registered_at == T0 and node.last_seen == T0 + timedelta(seconds=10)


def test_heartbeat_does_not_undrain_a_node(grid: Session) -> None:
    node = get_node(grid, "rmA", "a2")
    node.state = NodeState.DRAINED
    record_node_seen(grid, "rmA", "a2", {}, T0)
    assert node.state is NodeState.DRAINED


def test_heartbeat_accepts_what_a_node_spec_reports(grid: Session, topology) -> None:
    spec = topology.node("rmB", "b1")
    node = record_node_seen(grid, "rmB", "b1", spec.resources(), T0)
    assert node.features == ["bigmem"] and node.procs == 8


@pytest.mark.parametrize(
    ("rm", "node", "message"),
    [("rmZ", "a1", "unknown resource manager 'rmZ' \\(known: rmA, rmB\\)"),
     ("rmA", "zz", "unknown node 'zz' in resource manager 'rmA' \\(known: a1, a2\\)")],
)
def test_heartbeat_from_unknown_names_is_refused(grid: Session, rm, node, message) -> None:
    with pytest.raises(NotFoundError, match=message):
        record_node_seen(grid, rm, node, {}, T0)


@pytest.mark.parametrize(
    ("resources", "message"),
    [({"procs": -1}, "rmA/a1: procs must be a non-negative integer"),
     ({"memory_mb": "lots"}, "memory_mb must be a non-negative integer"),
     ({"procs": True}, "procs must be a non-negative integer"),
     ({"gpus": 2}, "unknown resource key\\(s\\) 'gpus'"),
     ({"features": "fast"}, "features must be a list of strings"),
     ({"attributes": ["x"]}, "attributes must be a mapping with string keys"),
     ({"attributes": {"t": float("nan")}}, "attributes must be plain JSON values"),
     ({"disk_mb": 2**31}, "disk_mb must be a non-negative integer")],
)
def test_bad_resources_are_refused_and_nothing_changes(grid: Session, resources, message) -> None:
    with pytest.raises(RecordError, match=message):
        record_node_seen(grid, "rmA", "a1", resources, T0)
    grid.rollback()
    node = get_node(grid, "rmA", "a1")
    assert node.procs == 4 and node.last_seen is None


def test_sync_refuses_negative_resources_from_a_duck_typed_topology(session: Session) -> None:
    class Spec:
        name, rm, procs, memory_mb, disk_mb, swap_mb = "n1", "rmX", -4, 0, 0, 0
        features, attributes = (), {}

    class RM:
        name, policy_file, nodes = "rmX", None, (Spec(),)

    class Topo:
        rms = {"rmX": RM()}

    with pytest.raises(RecordError, match="rmX/n1: procs must be a non-negative integer"):
        sync_topology(session, Topo())
