"""Durable SQL reservations mirrored into the token store (the restore after a Redis loss)."""

from __future__ import annotations

import os
from datetime import datetime, timezone

import pytest
from sqlalchemy import select

from grid_tasks.db import Reservation, get_engine, session_factory, session_scope, sync_topology
from grid_tasks.db.models import ReservationKind
from grid_tasks.db.testing import temporary_database
from grid_tasks.legion.collection import ENACTED, Collection, durable_claims
from grid_tasks.legion.tokens import Claim, RefusalReason, TokenRefused, TokenStore, scan
from grid_tasks.topology import load_topology
from tests.conftest import DEMO_TOPOLOGY

START = datetime(2030, 1, 1, 12, 0, tzinfo=timezone.utc)
END = datetime(2030, 1, 1, 13, 0, tzinfo=timezone.utc)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def rows(request):
    url = None
    if request.param == "postgres":
        url = os.environ.get("GRID_TASKS_TEST_POSTGRES_URL")
        if not url:
            pytest.skip("GRID_TASKS_TEST_POSTGRES_URL not set")
    with temporary_database(url) as db_url:
        factory = session_factory(get_engine(db_url))
        with session_scope(factory) as session:
            sync_topology(session, load_topology(DEMO_TOPOLOGY))
            session.add_all([
                Reservation(name="maint", rm="rmA", kind=ReservationKind.ADMIN,
                            nodes=["node1"], resources={"procs_by_node": {"node1": 3}},
                            start_time=START, end_time=END),
                Reservation(name="grid.7", rm="rmB", kind=ReservationKind.GRID,
                            nodes=["node3", "node4"], resources={ENACTED: True},
                            confirmed=True, start_time=START, end_time=END),
                # reserved, but its broker never confirmed the tokens: half-made
                Reservation(name="grid.9", rm="rmB", kind=ReservationKind.GRID,
                            nodes=["node4"], resources={}, confirmed=True,
                            start_time=START, end_time=END),
                Reservation(name="grid.8", rm="rmB", kind=ReservationKind.GRID,
                            nodes=["node3"], resources={}, confirmed=False,
                            start_time=START, end_time=END),
            ])
        with session_scope(factory) as session:
            yield list(session.scalars(select(Reservation)))


def test_durable_reservations_restore_into_the_token_store(rows, store: TokenStore) -> None:
    capacities = Collection(load_topology(DEMO_TOPOLOGY)).capacities()
    durable = durable_claims(rows, capacities)
    assert sorted(group for group, _, _ in durable) == ["sql.rmA.maint", "sql.rmB.grid.7"]
    claims = {c.resource: c.procs for _, _, cs in durable for c in cs}
    assert claims == {"rmA/node1": 3, "rmB/node3": 2, "rmB/node4": 2}  # whole nodes
    with pytest.raises(TokenRefused) as info:  # a store that lost its state refuses
        store.take([Claim("rmA/node1", START.timestamp(), END.timestamp(), 1)], "b")
    assert info.value.reason is RefusalReason.UNKNOWN
    store.restore(capacities, durable)
    store.restore(capacities, durable)  # idempotent
    at = START.timestamp() + 60
    store.take([Claim("rmA/node1", at, at + 60, 1)], "b")  # 3 of 4 held: one left
    with pytest.raises(TokenRefused):
        store.take([Claim("rmA/node1", at, at + 60, 1)], "b")
    with pytest.raises(TokenRefused):
        store.take([Claim("rmB/node4", at, at + 60, 1)], "b")
    report = scan(store)
    assert report.ok and report.confirmed == 3
