"""What job_request refuses before anything is stored (no SQL row, no store, no chord)."""

from __future__ import annotations

import pytest
import redis

from grid_tasks import db
from grid_tasks.client import Grid
from grid_tasks.db.models import CoallocatedJob
from grid_tasks.embedded.stack import prepare_database
from grid_tasks.errors import NotFoundError
from grid_tasks.gram.errors import JobRefusedError
from grid_tasks.settings import Settings
from grid_tasks.topology import load_topology

GOOD = "(&(resourceManagerContact=rmA)(label=a)(count=1)(executable=/bin/true))"


@pytest.mark.parametrize("bad,error,match", [
    ("(&(resourceManagerContact=rmZ)(label=z)(count=1)(executable=/bin/true))",
     NotFoundError, "unknown resource manager 'rmZ'.*rmA, rmB"),
    ("(&(resourceManagerContact=rmB)(label=z)(count=99)(executable=/bin/true))",
     JobRefusedError, r"asks for 99 processors and rmB has \d+ in all"),
])
def test_a_component_no_rm_can_hold_refuses_the_whole_request(
        settings: Settings, bad: str, error: type, match: str) -> None:
    prepare_database(settings, load_topology(settings.topology_file))
    broker = redis.Redis.from_url(settings.broker_url)
    grid = Grid(settings)
    try:
        with pytest.raises(error, match=match):
            grid.job_request("+" + GOOD + bad, barrier_timeout=60)
        with db.session_scope(grid.sessions) as session:
            assert session.query(CoallocatedJob).count() == 0
        assert broker.llen("gram.rmA") == 0  # no header sent for the good component
    finally:
        grid.close()
        broker.close()
        db.dispose_engines(settings.database_url)
