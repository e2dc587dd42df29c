"""One private fault grid (own Redis, SQLite, scheduler, two HA beats, four node daemons)
shared by the fault cases of this package; every process must be gone at teardown."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from grid_tasks.faults import FaultGrid


@pytest.fixture(scope="package")
def fault_grid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultGrid]:
    grid = FaultGrid(tmp_path_factory.mktemp("faults") / "grid").start()
    try:
        yield grid
    finally:
        left = grid.stop()
    assert left == [], f"fault grid processes survived teardown: {left}"
