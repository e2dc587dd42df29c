"""The live broker end to end: real scheduler worker (estimate/reserve tasks, iterations),
gatekeepers, node daemons, SQLite and the token store on the grid's private Redis."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from grid_tasks.broker.coreservation import CoReservationRefused
from grid_tasks.broker.enactment import RemoteEnactment
from grid_tasks.broker.live import Broker, new_job_key
from grid_tasks.broker.placement import PlacementError
from grid_tasks.db import Reservation, ReservationKind, session_scope
from grid_tasks.db.models import Job as JobRow
from grid_tasks.legion.collection import Requester
from grid_tasks.legion.tokens import scan
from grid_tasks.states import JobState
from tests.duroc.live import duroc_grid_of, markers, program

pytestmark = pytest.mark.timeout(120)

#: Seconds from planning to the common start: reservations made and both subjobs
#: submitted (and bound) before it, even on a loaded machine.
LEAD = 6.0
ME = Requester("tester", (), "localhost")


@pytest.fixture(scope="module")
def live(redis_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield from duroc_grid_of(redis_server, tmp_path_factory)


@pytest.fixture
def broker(live: Any) -> Iterator[Broker]:
    made = Broker.for_settings(live.settings, live.grid.app, lead=LEAD, timeout=20.0)
    yield made
    made.close()


def grid_rows(live: Any, job_key: str | None = None) -> list[tuple[str, str, int | None]]:
    """(rm, name, owner job) of the grid reservations (of one job key)."""
    with session_scope(live.grid.sessions) as session:
        rows = session.scalars(select(Reservation).where(
            Reservation.kind == ReservationKind.GRID)).all()
        return sorted((r.rm, r.name, r.owner_job_id) for r in rows
                      if job_key is None or (r.resources or {}).get("job_key") == job_key)


def held_tokens(broker: Broker, job_key: str) -> list[Any]:
    return [t for t in broker.store.tokens()
            if t.group == job_key or t.owner == f"broker-{job_key}"]


def fixed_estimates(answers: dict[str, dict[str, int]]):
    """Estimates saying every RM is free at the asked instant on the given nodes."""
    def fetch(asks):
        out = []
        for rm, procs, _duration, t in asks:
            nodes = answers[rm]
            out.append([(t, {next(iter(nodes)): procs})] if procs <= sum(nodes.values())
                       else [])
        return out
    return fetch


def block_node3(live: Any, name: str) -> None:
    """An administrative reservation holding rmB's node3 for the next hour (for nobody)."""
    now = datetime.now(timezone.utc)
    with session_scope(live.grid.sessions) as session:
        session.add(Reservation(name=name, rm="rmB", kind=ReservationKind.ADMIN,
                                acl={"users": ["nobody"]}, nodes=["node3"],
                                resources={"procs_by_node": {"node3": 2}},
                                start_time=now - timedelta(seconds=1),
                                end_time=now + timedelta(hours=1)))


def unblock(live: Any, name: str) -> None:
    with session_scope(live.grid.sessions) as session:
        for row in session.scalars(select(Reservation).where(Reservation.name == name)):
            session.delete(row)


def component(label: str, count: int, prog: Path, out: Path, extra: str = "") -> str:
    import sys

    return (f'(&(label={label})(count={count}){extra}(maxWallTime=1)'
            f'(executable="{sys.executable}")(arguments="{prog}" "{out}" "plain"))')


def test_unplaced_component_is_coreserved_and_all_start_together(live, tmp_path):
    grid = live.grid
    out = tmp_path / "markers"
    out.mkdir()
    prog = program(tmp_path)
    rsl = ("+" + component("fixed", 1, prog, out, "(resourceManagerContact=rmA)")
           + component("free", 2, prog, out, "(requirements='$site == \"south\"')"))
    job = grid.job_request(rsl, barrier_timeout=60, lead=LEAD)
    co = job.coreservation
    assert [(p.label, p.rm) for p in co.parts] == [("fixed", "rmA"), ("free", "rmB")]
    with Broker.for_settings(live.settings, grid.app) as broker_:
        tokens = held_tokens(broker_, co.job_key)  # held for the job until it ends
        assert tokens and all(t.confirmed for t in tokens)
    assert co.part("free").procs == 2 and co.start >= time.time() - LEAD
    final = job.wait(timeout=60)
    assert final.state is JobState.DONE, final
    assert final.barrier == "released"
    assert markers(out) == ["fixed-0", "free-0", "free-1"]
    starts = [grid.status(s.gram_job).start_time.timestamp() for s in final.subjobs]
    assert max(starts) - min(starts) <= 1.0, (starts, co.start)
    assert min(starts) >= co.start - 1e-3, (starts, co.start)  # never before the start
    with session_scope(grid.sessions) as session:
        for sub in final.subjobs:  # each GRAM subjob was bound to its own reservation
            row = session.get(JobRow, sub.gram_job)
            assert row.rm == co.part(sub.label).rm and row.early_start is False
            assert f"reservation = {co.job_key}.{sub.label}" in row.rsl
    with Broker.for_settings(live.settings, grid.app) as broker_:
        # the RMs drop a finished job's reservations themselves, and with them its
        # tokens (the reservations ran to 5 minutes: nothing may stay blocked that long)
        deadline = time.monotonic() + 20
        while held_tokens(broker_, co.job_key) or grid_rows(live, co.job_key):
            assert time.monotonic() < deadline, (held_tokens(broker_, co.job_key),
                                                 grid_rows(live, co.job_key))
            time.sleep(0.1)
        assert broker_.release(co) == 0  # idempotent: nothing was left to release


def test_refusal_moves_to_next_schedule_keeping_unchanged_placements(live, broker):
    # rmB claims node3 is free, but an administrative reservation holds it: its RM
    # refuses, and the next schedule keeps 'keep' (same RM, start, nodes, token)
    block_node3(live, "blocker.refusal")
    try:
        spy = []
        reserve = broker.remote.reserve
        broker.remote.reserve = lambda calls: spy.append([c["name"] for c in calls]) or \
            reserve(calls)
        broker._fetch = fixed_estimates({"rmA": {"node1": 4}, "rmB": {"node3": 2}})
        broker.policy = "spread"  # the two-RM schedule first
        comps = broker.components("+(&(executable=/bin/true)(resourceManagerContact=rmA)"
                                  "(label=keep))(&(executable=/bin/true)(label=moved))", ME)
        key = new_job_key("test")
        co = broker.coreserve(comps, now=time.time(), job_key=key, requester=ME)
        assert [(p.label, p.rm) for p in co.parts] == [("keep", "rmA"), ("moved", "rmA")]
        first, second = co.attempts[:2]
        assert first["outcome"] == "vetoed" and first["rms"] == ["rmA", "rmB"]
        assert first["refusals"][0]["rm"] == "rmB"
        assert "ReservationRefused" in first["refusals"][0]["reason"]
        assert second["outcome"] == "confirmed" and second["kept"] == 1
        # 'keep' was reserved once: its reservation (and token) survived the refusal
        assert spy == [[f"{key}.keep", f"{key}.moved"], [f"{key}.moved"]]
        assert [(rm, n) for rm, n, _ in grid_rows(live, key)] == [
            ("rmA", f"{key}.keep"), ("rmA", f"{key}.moved")]
        assert broker.release(co) == 2
    finally:
        unblock(live, "blocker.refusal")
    assert grid_rows(live, key) == [] and held_tokens(broker, key) == []


def test_when_every_schedule_is_refused_nothing_is_left_reserved(live, broker):
    block_node3(live, "blocker.none")
    try:
        broker._fetch = fixed_estimates({"rmA": {"node1": 4}, "rmB": {"node3": 2}})
        comps = broker.components("+(&(executable=/bin/true)(resourceManagerContact=rmA))"
                                  "(&(executable=/bin/true)(resourceManagerContact=rmB)"
                                  "(label=blocked))", ME)
        key = new_job_key("test")
        with pytest.raises(CoReservationRefused) as err:
            broker.coreserve(comps, now=time.time(), job_key=key, requester=ME)
        assert "rmB" in str(err.value) and err.value.attempts[0]["outcome"] == "vetoed"
    finally:
        unblock(live, "blocker.none")
    # rmA had accepted its part before rmB refused: released again, tokens too
    assert grid_rows(live, key) == []
    assert held_tokens(broker, key) == []
    assert scan(broker.store).ok


def test_a_component_no_rm_can_hold_is_refused_before_anything_is_reserved(live, broker):
    before = grid_rows(live)
    with pytest.raises(PlacementError) as err:
        live.grid.job_request("+(&(executable=/bin/true)(label=huge)(count=64))")
    assert "'huge'" in str(err.value) and "64 processors" in str(err.value)
    # 4 processors fit rmB's configuration, but its node4 has no daemon: never
    comps = broker.components("&(executable=/bin/true)(label=wide)(count=4)"
                              "(requirements='$site == \"south\"')", ME)
    with pytest.raises(PlacementError) as err:
        broker.plan(comps, now=time.time(), requester=ME)
    assert "'wide'" in str(err.value) and "rmB: never" in str(err.value)
    assert grid_rows(live) == before


def test_coalloc_submit_places_components_without_contact(live, tmp_path):
    import json
    import subprocess

    from grid_tasks.embedded.stack import grid_tasks_command

    out = tmp_path / "markers"
    out.mkdir()
    prog = program(tmp_path)
    rsl = ("+" + component("one", 1, prog, out, "(resourceManagerContact=rmB)")
           + component("two", 2, prog, out))
    result = subprocess.run(grid_tasks_command("coalloc", "submit", "--wait", "--timeout", "60",
                                               "--json", rsl),
                            env=live.env, capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, (result.stdout, result.stderr)
    data = json.loads(result.stdout)
    assert data["state"] == "DONE" and data["barrier"] == "released"
    co = data["coreservation"]
    assert [p["label"] for p in co["parts"]] == ["one", "two"]
    assert co["parts"][0]["rm"] == "rmB" and co["parts"][1]["procs"] == 2
    assert [s["rm"] for s in data["subjobs"]] == [p["rm"] for p in co["parts"]]
    assert markers(out) == ["one-0", "two-0", "two-1"]
    with Broker.for_settings(live.settings, live.grid.app) as broker_:
        from grid_tasks.broker.coreservation import CoReservation

        broker_.release(CoReservation.from_dict(co))
        assert held_tokens(broker_, co["job_key"]) == []
    assert grid_rows(live, co["job_key"]) == []


TWO_RMS = ("+(&(executable=/bin/true)(resourceManagerContact=rmA)(label=a))"
           "(&(executable=/bin/true)(resourceManagerContact=rmB)(label=b))")


def test_a_confirmed_coreservation_is_marked_enacted_and_survives_a_store_loss(live, broker):
    """The broker marks its rows enacted after confirming the tokens; a token store that
    lost its state (a fresh prefix on the same Redis) gets them back from SQL."""
    from grid_tasks.legion.collection import enacted
    from grid_tasks.legion.tokens import TokenStore
    from grid_tasks.scheduling.grid_reservations import ensure_restored

    broker._fetch = fixed_estimates({"rmA": {"node1": 4}, "rmB": {"node3": 2}})
    key = new_job_key("test")
    co = broker.coreserve(broker.components(TWO_RMS, ME), now=time.time(), job_key=key,
                          requester=ME)
    fresh = TokenStore(broker.store.client, prefix=f"lost-{key}")
    try:
        with session_scope(live.grid.sessions) as session:
            rows = [r for r in session.scalars(select(Reservation).where(
                Reservation.kind == ReservationKind.GRID))
                if (r.resources or {}).get("job_key") == key]
            assert len(rows) == 2 and all(enacted(r) for r in rows)
            assert ensure_restored(fresh, session, time.time())
        mirrored = {t.group for t in fresh.tokens() if t.confirmed}
        assert {f"sql.{p.rm}.{p.name}" for p in co.parts} <= mirrored
    finally:
        broker.release(co)
        keys = list(fresh.client.scan_iter(match=f"lost-{key}*"))
        if keys:
            fresh.client.delete(*keys)
    assert grid_rows(live, key) == [] and held_tokens(broker, key) == []


def test_a_coreservation_that_cannot_be_recorded_is_released(live, broker):
    from grid_tasks.broker.coreservation import CoReservationUnrecorded

    class Unreachable(RemoteEnactment):  # the RMs' database away
        def mark(self, parts: Any) -> int:
            raise RuntimeError("database unreachable")

    broker._fetch = fixed_estimates({"rmA": {"node1": 4}, "rmB": {"node3": 2}})
    broker.enactment = Unreachable(broker.remote)
    key = new_job_key("test")
    with pytest.raises(CoReservationUnrecorded, match="database unreachable"):
        broker.coreserve(broker.components(TWO_RMS, ME), now=time.time(), job_key=key,
                         requester=ME)
    assert grid_rows(live, key) == [] and held_tokens(broker, key) == []
    assert scan(broker.store).ok


def test_a_broker_on_a_store_that_lost_its_state_restores_it_before_taking(live, broker):
    """Capacities alone would let tokens through over reservations the lost store no
    longer shows: the broker has an RM mirror SQL's durable reservations back first."""
    key = new_job_key("test")
    block_node3(live, f"block-{key}")
    store = broker.store  # the grid's token store, the RMs' too: it loses its state
    lost = list(store.client.scan_iter(match=f"{store.prefix}*"))
    if lost:
        store.client.delete(*lost)
    broker._fetch = fixed_estimates({"rmA": {"node1": 4}, "rmB": {"node3": 2}})
    try:
        with pytest.raises(CoReservationRefused):
            broker.coreserve(broker.components(TWO_RMS, ME), now=time.time(), job_key=key,
                             requester=ME)
        # an RM restored it from SQL (the broker has no database) before any token
        mirrored = {t.group for t in store.tokens() if t.confirmed}
        assert f"sql.rmB.block-{key}" in mirrored
        assert held_tokens(broker, key) == []
    finally:
        unblock(live, f"block-{key}")
    assert grid_rows(live, key) == []
