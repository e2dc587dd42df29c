"""Grid-level planning commands on a live grid: ``showstart`` without ``-r`` and
``setres/showres/releaseres --grid``, through the real estimate/reserve/release tasks."""

from __future__ import annotations

import gc
import json
import re
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
from rich.console import Console

from grid_tasks.broker.gridres import (
    GridReservationError, parse_grid_spec, release_grid_reservations, set_grid_reservation,
    show_grid_reservations,
)
from grid_tasks.broker.gridview import grid_start_view
from grid_tasks.broker.live import Broker
from grid_tasks.broker.placement import PlacementError
from grid_tasks.db import session_scope
from grid_tasks.embedded.stack import grid_tasks_command
from grid_tasks.errors import NotFoundError
from grid_tasks.legion.collection import Requester
from grid_tasks.legion.tokens import TokenStore, scan
from grid_tasks.ops.reservations import show_reservations
from tests.gram.conftest import _live_grid

pytestmark = pytest.mark.timeout(120)

COMMAND = grid_tasks_command()


@pytest.fixture(scope="module")
def live(redis_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A live grid (scheduler worker in process, node daemons for node1-3); no jobs run."""
    for grid in _live_grid(redis_server, tmp_path_factory, None):
        yield grid
        gc.collect()


def run(live: Any, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([*COMMAND, *args], env=live.env, capture_output=True, text=True,
                            timeout=60)
    assert (result.returncode == 0) is ok, (result.stdout, result.stderr)
    return result


def cli(live: Any, *args: str) -> Any:
    return json.loads(run(live, *args, "--json").stdout)


def epoch(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


@pytest.fixture
def broker(live: Any) -> Iterator[Broker]:
    made = Broker.for_settings(live.settings, live.grid.app, timeout=20.0)
    yield made
    made.close()


def test_showstart_without_rm_asks_every_rm(live):
    single = cli(live, "showstart", "2@10:00")
    assert single["kind"] == "single"
    assert [r["rm"] for r in single["rms"]] == ["rmA", "rmB"]
    assert all(r["answer"] == "ok" and r["estimates"] for r in single["rms"])
    assert single["best"] in ("rmA", "rmB")
    assert sum(single["rms"][0]["estimates"][0]["allocation"].values()) == 2
    multi = cli(live, "showstart", "+(&(executable=/bin/true)(resourceManagerContact=rmB)"
                "(count=2)(label=b))(&(executable=/bin/true)(count=3)(label=x)(maxWallTime=5))")
    assert multi["kind"] == "multi" and multi["schedules"]
    best = multi["schedules"][0]
    assert [(p["label"], p["rm"]) for p in best["placements"]] == [("b", "rmB"), ("x", "rmA")]
    assert best["start_in"] >= 0
    starts = [epoch(s["start"]) for s in multi["schedules"]]
    assert starts == sorted(starts)
    console = Console(width=160, record=True)
    console.print(grid_start_view(multi))
    text = console.export_text()
    assert "rmA" in text and "rmB" in text and "node1:3" in text


def test_showstart_lists_every_rm_in_one_time_format(live):
    # 6 processors fit rmA (8) only: rmB (4) is listed, saying why it never fits
    wide = cli(live, "showstart", "6@10:00")
    assert [r["rm"] for r in wide["rms"]] == ["rmA", "rmB"] and wide["best"] == "rmA"
    assert wide["rms"][1]["answer"] == ("never: it asks for 6 processors and rmB has 4 in "
                                        "all") and wide["rms"][1]["estimates"] == []
    text = run(live, "showstart", "6@10:00").stdout
    assert "rmB" in text and "never" in text and "Earliest start" in text
    assert "00:00:00" in text and not re.search(r"\d{4}-\d\d-\d\dT", text)  # as with -r
    bare = run(live, "showstart", "-r", "rmA", "6@10:00").stdout
    assert "Earliest start" in bare and not re.search(r"\d{4}-\d\d-\d\dT", bare)
    huge = run(live, "showstart", "-r", "rmA", "100@1:00:00", ok=False)
    assert huge.returncode == 1 and huge.stdout == ""
    assert ("can never run on rmA: it asks for 100 processors and rmA has 8 processors "
            "on 2 nodes") in huge.stderr


def test_grid_reservation_set_listed_and_released_everywhere(live):
    made = cli(live, "setres", "--grid", "-n", "gridres1", "-s", "+10:00", "-d", "5:00",
               "1@rmA,1@rmB")
    assert made["job_key"] == "gridres1" and made["rms"] == ["rmA", "rmB"]
    assert {p["reservation"] for p in made["parts"]} == {"gridres1.rmA", "gridres1.rmB"}
    assert len({p["start"] for p in made["parts"]}) == 1  # one common start
    assert made["start"] >= time.time() + 500
    listed = cli(live, "showres", "--grid")
    mine = [r for r in listed if r["name"] == "gridres1"]
    assert len(mine) == 1 and mine[0]["rms"] == ["rmA", "rmB"] and mine[0]["procs"] == 2
    assert [(p["rm"], p["procs"]) for p in mine[0]["parts"]] == [("rmA", 1), ("rmB", 1)]
    assert mine[0]["state"] == "Idle"
    now = datetime.now(timezone.utc)
    with session_scope(live.grid.sessions) as session:
        # the parts are ordinary grid reservations of each RM too (plain showres)
        plain = {r.name for r in show_reservations(session, now) if r.kind == "Grid"}
    assert plain >= {"gridres1.rmA", "gridres1.rmB"}
    store = TokenStore.from_url(live.settings.redis_url)
    try:
        assert {t.group for t in store.tokens() if t.confirmed} >= {"gridres1"}
        released = cli(live, "releaseres", "--grid", "gridres1")
        assert [p["released"] for p in released[0]["parts"]] == [True, True]
        assert released[0]["tokens_released"] >= 2
        with session_scope(live.grid.sessions) as session:
            assert [r for r in show_grid_reservations(session, now) if r.name == "gridres1"] \
                == []
        assert [t for t in store.tokens() if t.group == "gridres1"] == []
        assert scan(store).ok
    finally:
        store.client.close()


def test_grid_reservation_of_unplaced_processors_and_refusals(live, broker):
    me = Requester("tester", (), "localhost")
    with session_scope(live.grid.sessions) as session:
        co = set_grid_reservation(broker, session, "anywhere", parse_grid_spec("3", 120.0),
                                  now=time.time(), not_before=0.0, requester=me)
    assert [(p.rm, p.procs) for p in co.parts] == [("rmA", 3)]  # rmB: 2 live processors
    with session_scope(live.grid.sessions) as session:
        with pytest.raises(GridReservationError, match="already exists"):
            set_grid_reservation(broker, session, "anywhere", parse_grid_spec("1", 60.0),
                                 now=time.time(), not_before=0.0, requester=me)
        with pytest.raises(NotFoundError, match="nosuch"):
            release_grid_reservations(broker, session, ["anywhere", "nosuch"])
        with pytest.raises(PlacementError, match="99 processors"):
            set_grid_reservation(broker, session, "huge", parse_grid_spec("99", 60.0),
                                 now=time.time(), not_before=0.0, requester=me)
        out = release_grid_reservations(broker, session, ["anywhere"])
    assert out[0]["parts"] == [{"rm": "rmA", "reservation": "anywhere.part0",
                                "released": True, "error": None}]
