"""Header task deliveries counted beside the coordination store (the redelivery proof)."""

from __future__ import annotations

from typing import Any

import pytest

from grid_tasks.client import Grid
from grid_tasks.duroc.control import Coallocator
from grid_tasks.duroc.control_rows import DELIVERIES_KEY, URL_KEY
from grid_tasks.duroc.errors import CoallocFinishedError
from grid_tasks.duroc.records import store_id
from grid_tasks.duroc.store_models import SubjobSpec
from grid_tasks.settings import Settings


def test_runs_and_redeliveries_are_counted_per_subjob(settings: Settings) -> None:
    grid = Grid(settings)
    try:
        co = Coallocator(grid.services)
        assert co.note_delivery(7, 0, "task-0", redelivered=False) is None  # no URL yet
        co.store.client.set(URL_KEY.format(7), "redis://job-7@host/3")
        # the job's runtime URL comes back with the count (the header's submission needs it)
        assert co.note_delivery(7, 0, "task-0", redelivered=True) == b"redis://job-7@host/3"
        co.note_delivery(7, 1, "task-1", redelivered=False)
        assert co.header_deliveries("duroc://coalloc/7") == {
            0: {"runs": 2, "redelivered": 1, "task": "task-0"},
            1: {"runs": 1, "redelivered": 0, "task": "task-1"}}
        assert co.header_deliveries(8) == {}
        assert 0 < co.store.client.ttl(DELIVERIES_KEY.format(7)) <= 24 * 3600
        co.store.close()
    finally:
        grid.close()


def _round_trips(client: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every round trip ``client`` makes from now on: one command, or one pipeline."""
    trips: list[str] = []
    command, pipeline = client.execute_command, client.pipeline

    def one(*args: Any, **kw: Any) -> Any:
        trips.append(str(args[0]))
        return command(*args, **kw)

    def piped(*args: Any, **kw: Any) -> Any:
        pipe = pipeline(*args, **kw)
        run = pipe.execute
        monkeypatch.setattr(pipe, "execute", lambda *a, **k: (trips.append("pipeline"),
                                                              run(*a, **k))[1])
        return pipe

    monkeypatch.setattr(client, "execute_command", one)
    monkeypatch.setattr(client, "pipeline", piped)
    return trips


def test_first_look_counts_the_delivery_and_reads_url_and_barrier_in_one_round_trip(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    grid = Grid(settings)
    try:
        co = Coallocator(grid.services)
        co.store.create_job(store_id(7), [SubjobSpec("a", 2), SubjobSpec("b", 1)])
        co.store.client.set(URL_KEY.format(7), "redis://job-7@host/3")
        trips = _round_trips(co.store.client, monkeypatch)
        url, info = co.first_look(7, 1, "task-1", redelivered=False)
        assert trips == ["pipeline"]
        assert url == b"redis://job-7@host/3"
        assert (info.label, info.size, info.entered, info.complete) == ("b", 1, 0, False)
        monkeypatch.undo()
        # an empty script cache (a restarted Redis) is settled by the plain snapshot
        co.store.client.script_flush()
        url, info = co.first_look(7, 0, "task-0", redelivered=True)
        assert (url, info.label, info.size) == (b"redis://job-7@host/3", "a", 2)
        assert co.header_deliveries(7) == {  # counted once each, the fallback included
            0: {"runs": 1, "redelivered": 1, "task": "task-0"},
            1: {"runs": 1, "redelivered": 0, "task": "task-1"}}
        co.store.delete_subjob(store_id(7), "b")
        assert co.first_look(7, 1, "task-1", redelivered=False)[1] is None  # deleted
        co.store.abort(store_id(7), "cancelled by user")
        with pytest.raises(CoallocFinishedError, match="aborted: cancelled by user"):
            co.first_look(7, 0, "task-0", redelivered=False)
        with pytest.raises(CoallocFinishedError, match="coallocated job 8 is gone"):
            co.first_look(8, 0, "task-0", redelivered=False)
        co.store.close()
    finally:
        grid.close()
