"""The kept node list (scheduling/node_table.py) and the silent-node read
(node/silent.py): the same nodes and states as a fresh read, a changed row read again,
and a kept list that is wrong shows in the core's decisions (real SQLite and Redis)."""

from __future__ import annotations

import json
import time

import pytest
import redis
from sqlalchemy import update

from grid_tasks import db
from grid_tasks.db.models import Node as NodeRow
from grid_tasks.embedded.stack import prepare_database
from grid_tasks.maui.nodeset import NodeSet
from grid_tasks.node.registry import NodeRegistry, alive_key
from grid_tasks.scheduling import node_table
from grid_tasks.scheduling.node_table import NodeTable
from grid_tasks.scheduling.state import load_scheduler
from grid_tasks.states import NodeState
from grid_tasks.topology import load_topology


@pytest.fixture
def grid(settings):
    prepare_database(settings, load_topology(settings.topology_file))
    client = redis.Redis.from_url(settings.redis_url)
    node_table.forget()
    yield db.session_factory(db.get_engine(settings.database_url)), NodeRegistry(client, 60)
    client.close()
    db.dispose_engines(settings.database_url)


def _fresh(session, rm):
    rows = session.connection().execute(node_table._NODES, {"rm": rm})
    return [(n.name, n.procs, n.memory, n.disk, n.swap, n.features)
            for n in NodeTable.from_rows(rm, 0, rows).templates]


def _shape(nodes):
    return [(n.name, n.procs, n.memory, n.disk, n.swap, n.features) for n in nodes]


def test_the_kept_list_is_reused_until_a_planned_with_column_changes(grid):
    sessions, _ = grid
    with db.session_scope(sessions) as s:
        first = node_table.node_table(s, "rmA")
        assert _shape(first.templates) == _fresh(s, "rmA")
    with db.session_scope(sessions) as s:  # a heartbeat's trace: still the same list
        s.execute(update(NodeRow).where(NodeRow.name == "node1").values(state=NodeState.IDLE))
    with db.session_scope(sessions) as s:
        assert node_table.node_table(s, "rmA") is first
    with db.session_scope(sessions) as s:
        s.execute(update(NodeRow).where(NodeRow.name == "node1").values(procs=16))
    with db.session_scope(sessions) as s:
        again = node_table.node_table(s, "rmA")
        assert again is not first and _shape(again.templates) == _fresh(s, "rmA")
        assert again.templates[0].procs == 16


def test_copies_are_handed_out(grid):
    sessions, _ = grid
    with db.session_scope(sessions) as s:
        table = node_table.node_table(s, "rmA")
    handed = table.nodes()
    handed[0].state = NodeState.DOWN
    assert table.templates[0].state is NodeState.IDLE and table.nodes()[0].usable


def test_a_wrong_kept_list_changes_decisions(grid):
    """The check can fail: a kept list whose counter stands but whose rows differ from
    the database's is what the core plans with (so the counter must move)."""
    sessions, _ = grid
    with db.session_scope(sessions) as s:
        honest = load_scheduler(s, "rmA", now=time.time())
        table = node_table.node_table(s, "rmA")
        kept = tuple(n.copy() for n in table.templates[:1])
        bent = NodeTable(table.rm, table.changes, kept, kept[0].name,
                         NodeSet.of(n.copy() for n in kept))
        node_table._kept[s.get_bind()]["rmA"] = bent
        misled = load_scheduler(s, "rmA", now=time.time())
    assert sorted(honest.engine.nodes) == ["node1", "node2"]
    assert sorted(misled.engine.nodes) == ["node1"]


def test_silent_nodes_as_states_sees_them(grid):
    sessions, registry = grid
    now = time.time()
    for node in ("node1", "node2"):
        registry.register("rmA", node, {}, {}, "test", now)
    names = ["node1", "node2", "node9", "nodeX"]
    with db.session_scope(sessions) as s:
        table = node_table.node_table(s, "rmA")
    registry.client.set(alive_key("rmA", "nodeX"), "not json")  # a foreign value
    registry.heartbeat("rmA", "node1", now, active=2)  # Running: alive
    registry.mark_down("rmA", "node2", now)
    expected = {node: state for (_, node), state in
                registry.states([("rmA", n) for n in names]).items()
                if state not in (NodeState.IDLE, NodeState.RUNNING, NodeState.BUSY)}
    assert expected == {"node2": NodeState.DOWN, "node9": NodeState.UNKNOWN,
                        "nodeX": NodeState.UNKNOWN}
    assert registry.silent("rmA", "\n".join(names)) == expected
    assert table.silent(registry) == {"node2": NodeState.DOWN}
    assert json.loads(registry.client.get(alive_key("rmA", "node1")))["active"] == 2


def test_silent_reads_past_one_mget_of_heartbeats(grid):
    _, registry = grid
    names = [f"x{i:04d}" for i in range(1005)]
    registry.register("rmA", "x1003", {}, {}, "test", time.time())
    found = registry.silent("rmA", "\n".join(names))
    assert len(found) == 1004 and "x1003" not in found
    assert set(found.values()) == {NodeState.UNKNOWN}
