"""The node list's change counter (migration 0006): every insert, delete, and update of
what the scheduler plans with (RM, name, resources, features) counts once for its RM, in
the writer's transaction; heartbeat columns do not count.  On SQLite and, when
GRID_TASKS_TEST_POSTGRES_URL is set, PostgreSQL (where the count happens at commit)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from sqlalchemy import delete, insert, select, update

from grid_tasks.db.models import Node, NodeChanges
from grid_tasks.states import NodeState

from .conftest import BACKENDS, two_rm_engine


@pytest.fixture(params=BACKENDS)
def engine(request):
    yield from two_rm_engine(request.param, "gt_nchanges")


def _counts(engine) -> dict[str, int]:
    with engine.connect() as conn:
        return dict(conn.execute(select(NodeChanges.rm, NodeChanges.changes)).all())


def _node(rm: str, name: str, **values) -> dict:
    return {"rm": rm, "name": name, "procs": 4, "memory_mb": 0, "disk_mb": 0, "swap_mb": 0,
            "features": [], "attributes": {}, "state": NodeState.UNKNOWN, **values}


def _write(engine, stmt, params=None) -> None:
    with engine.begin() as conn:
        conn.execute(stmt, params) if params is not None else conn.execute(stmt)


def test_each_planned_with_change_counts_once_for_its_rm(engine):
    nodes = Node.__table__
    _write(engine, insert(nodes), [_node("rmA", "a1"), _node("rmA", "a2"), _node("rmB", "b1")])
    assert _counts(engine) == {"rmA": 2, "rmB": 1}
    at = datetime.now(timezone.utc)
    _write(engine, update(nodes).where(nodes.c.name == "a1").values(  # a heartbeat's trace
        last_seen=at, registered_at=at, state=NodeState.IDLE, attributes={"x": 1}))
    _write(engine, update(nodes).where(nodes.c.name == "a1").values(procs=4))  # same value
    assert _counts(engine) == {"rmA": 2, "rmB": 1}
    for values in ({"procs": 8}, {"memory_mb": 1}, {"disk_mb": 1}, {"swap_mb": 1},
                   {"features": ["fast"]}, {"name": "a9"}):
        _write(engine, update(nodes).where(nodes.c.name == "a1").values(**values))
    assert _counts(engine) == {"rmA": 8, "rmB": 1}
    _write(engine, update(nodes).where(nodes.c.name == "b1").values(rm="rmA"))  # moves RM
    _write(engine, delete(nodes).where(nodes.c.name == "a2"))
    assert _counts(engine) == {"rmA": 10, "rmB": 2}


def test_a_rolled_back_change_does_not_count(engine):
    with engine.connect() as conn:
        conn.execute(insert(Node.__table__), [_node("rmA", "a1")])
        conn.rollback()
    assert _counts(engine) == {}
