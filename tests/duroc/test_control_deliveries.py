"""Header task deliveries counted beside the coordination store (the redelivery proof)."""

from __future__ import annotations

from grid_tasks.client import Grid
from grid_tasks.duroc.control import Coallocator
from grid_tasks.duroc.control_rows import DELIVERIES_KEY, URL_KEY
from grid_tasks.settings import Settings


def test_runs_and_redeliveries_are_counted_per_subjob(settings: Settings) -> None:
    grid = Grid(settings)
    try:
        co = Coallocator(grid)
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
