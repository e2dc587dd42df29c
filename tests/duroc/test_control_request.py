"""What a coallocation request is refused for before anything is stored (no SQL row, no
store, no chord): at the scheduler (``serve_request``, run here as the scheduler worker
would), and at the client before any message (the RSL, with line and column)."""

from __future__ import annotations

import pytest
import redis

from grid_tasks import db
from grid_tasks.client import Grid
from grid_tasks.db.models import CoallocatedJob
from grid_tasks.duroc.control import Coallocator
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
            Coallocator(grid.services).serve_request("alice", "+" + GOOD + bad, account=None,
                                           barrier_timeout=60, variables=None, source="<rsl>")
        with db.session_scope(grid.sessions) as session:
            assert session.query(CoallocatedJob).count() == 0
        assert broker.llen("gram.rmA") == 0  # no header sent for the good component
    finally:
        grid.close()
        broker.close()
        db.dispose_engines(settings.database_url)


def test_a_bad_rsl_is_refused_by_the_client_before_any_message(settings: Settings) -> None:
    from grid_tasks.duroc.errors import CoallocRequestError
    from grid_tasks.rsl.errors import RSLError

    broker = redis.Redis.from_url(settings.broker_url)
    grid = Grid(settings)
    try:
        with pytest.raises(RSLError) as info:
            grid.job_request("+" + GOOD + "\n(&(count=", barrier_timeout=60)
        assert info.value.line == 2
        with pytest.raises(CoallocRequestError, match="duplicate subjob label 'a'"):
            grid.job_request("+" + GOOD + GOOD, barrier_timeout=60)
        with pytest.raises(RSLError):
            grid.subjob_add(1, "+(&(count=")
        assert broker.llen("scheduler") == 0  # nothing asked of the scheduler
    finally:
        grid.close()
        broker.close()
