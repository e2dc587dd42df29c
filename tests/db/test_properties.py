"""Property tests: timestamps survive any zone, bad heartbeats only raise typed errors."""

from __future__ import annotations

from datetime import datetime, timezone

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.orm import Session

from grid_tasks.db import Job, RecordError, record_node_seen

from .conftest import T0

# The fixtures are shared by all examples on purpose: each example adds its own rows.
_SETTINGS = settings(max_examples=30, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])

_aware = st.datetimes(
    min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1),
    timezones=st.timezones(),
)


@_SETTINGS
@given(when=_aware)
def test_any_aware_timestamp_round_trips_to_the_same_instant(grid: Session, when) -> None:
    job = Job(rm="rmA", submit_time=when)
    grid.add(job)
    grid.commit()
    grid.expire(job)
    # Compare in UTC: Python never calls a DST-ambiguous time equal across zones.
    assert job.submit_time == when.astimezone(timezone.utc)
    assert job.submit_time.tzinfo is not None
    assert job.submit_time.utcoffset() == timezone.utc.utcoffset(None)


_values = st.one_of(
    st.integers(min_value=-(2**40), max_value=2**40), st.text(max_size=5), st.booleans(),
    st.none(), st.floats(allow_nan=True), st.lists(st.text(max_size=3), max_size=3),
    st.tuples(st.text(max_size=3)), st.dictionaries(st.integers(), st.integers(), max_size=1),
    st.dictionaries(st.text(max_size=3), st.one_of(st.integers(), st.floats()), max_size=2),
)
_resources = st.dictionaries(
    st.sampled_from(["procs", "memory_mb", "disk_mb", "swap_mb", "features", "attributes",
                     "gpus", ""]),
    _values, max_size=4,
)


@_SETTINGS
@given(resources=_resources)
def test_heartbeats_are_stored_or_refused_typed(grid: Session, resources) -> None:
    try:
        node = record_node_seen(grid, "rmA", "a1", resources, T0)
    except RecordError:
        grid.rollback()
        return
    grid.commit()
    grid.expire(node)  # compare what the database holds
    for key, value in resources.items():
        expected = list(value) if key == "features" else value
        assert getattr(node, key) == expected
