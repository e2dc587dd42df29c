"""Maui's time and duration notations: parsing, printing, and errors naming the option."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings, strategies as st

from grid_tasks.ops.timefmt import (
    TimeFormatError, format_duration, parse_duration, parse_time,
)

NOW = datetime(2026, 3, 4, 12, 0, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize("text, seconds", [
    ("30", 30), ("1:30", 90), ("2:00:00", 7200), ("1:02:03:04", 93784),
    ("90s", 90), ("30m", 1800), ("2h", 7200), ("1d", 86400), ("1.5h", 5400),
])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


def test_infinity_and_bad_durations():
    assert parse_duration("INFINITY") == float("inf")
    with pytest.raises(TimeFormatError, match=r"-d: cannot read duration '2 hours'"):
        parse_duration("2 hours", option="-d")
    with pytest.raises(TimeFormatError, match="must be positive"):
        parse_duration("0:00", option="-d")


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=1, max_value=10 * 86400))
def test_format_then_parse_is_identity(seconds):
    assert parse_duration(format_duration(seconds)) == seconds


def test_times():
    assert parse_time("now", NOW) == NOW
    assert parse_time("+1:00:00", NOW) == NOW + timedelta(hours=1)
    assert parse_time("-1d", NOW) == NOW - timedelta(days=1)
    assert parse_time("13:30", NOW) == NOW.replace(hour=13, minute=30)
    # a clock time already past today means tomorrow
    assert parse_time("11:00", NOW) == NOW.replace(hour=11) + timedelta(days=1)
    assert parse_time("08:00_03/10", NOW) == datetime(2026, 3, 10, 8, tzinfo=timezone.utc)
    assert parse_time("2026-05-01T10:00:00Z", NOW) == datetime(2026, 5, 1, 10, tzinfo=timezone.utc)


def test_bad_times_name_the_option():
    with pytest.raises(TimeFormatError, match=r"^-s: cannot read time 'tomorrow'"):
        parse_time("tomorrow", NOW, option="-s")
    with pytest.raises(TimeFormatError, match=r"-s: invalid time '25:00'"):
        parse_time("25:00", NOW, option="-s")


def test_format_duration():
    assert format_duration(59) == "00:00:59"
    assert format_duration(-90) == "-00:01:30"
    assert format_duration(90061) == "1:01:01:01"
    assert format_duration(float("inf")) == "INFINITY"
    assert format_duration(None) == "-"
