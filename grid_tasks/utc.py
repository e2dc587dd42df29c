"""UTC conversions between SQL datetimes and the core's time axis (epoch seconds).

SQL rows carry UTC; a naive datetime read back (SQLite) means UTC.  Nothing here
reads the clock.
"""

from __future__ import annotations

from datetime import datetime, timezone

__all__ = ["as_utc", "epoch", "from_epoch", "iso_seconds"]


def as_utc(value: datetime) -> datetime:
    """``value`` as an aware datetime; a naive one is taken as UTC."""
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def epoch(value: datetime) -> float:
    """POSIX seconds of an aware (or naive UTC) datetime."""
    return as_utc(value).timestamp()


def from_epoch(seconds: float) -> datetime:
    """The aware UTC datetime of POSIX seconds."""
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


def iso_seconds(seconds: float) -> str:
    """POSIX seconds as ISO 8601 (UTC, whole seconds)."""
    return from_epoch(seconds).isoformat(timespec="seconds")
