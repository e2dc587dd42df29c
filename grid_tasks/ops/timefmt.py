"""Maui's time and duration notations for the operator commands (pure).

Durations are ``[[[DD:]HH:]MM:]SS`` (``2:00:00`` is two hours), a number with a
unit (``90s``, ``30m``, ``2h``, ``1d``) or ``INFINITY``.  Absolute times are
``HH[:MM[:SS]][_MO[/DD[/YY]]]`` in UTC (the date defaults to today, and a time
of day already past means tomorrow), ``+DURATION`` or ``-DURATION`` from now, ``now``,
or ISO 8601.  Errors name the option and the offending text.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone

from grid_tasks.errors import GridTasksError

INFINITE = math.inf
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_UNIT_RE = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$", re.IGNORECASE)
_CLOCK_RE = re.compile(r"^(\d{1,2})(?::(\d{1,2}))?(?::(\d{1,2}))?"
                       r"(?:_(\d{1,2})(?:/(\d{1,2})(?:/(\d{2,4}))?)?)?$")


class OpsError(GridTasksError):
    """Root of the operator commands' own errors."""


class TimeFormatError(OpsError):
    """A time or duration argument that cannot be read; names the option and the text."""


def parse_duration(text: str, *, option: str = "duration") -> float:
    """Seconds in ``text`` (see the module doc); ``math.inf`` for INFINITY."""
    raw = text.strip()
    if raw.upper() in ("INFINITY", "INF"):
        return INFINITE
    unit = _UNIT_RE.match(raw)
    if unit:
        seconds = float(unit.group(1)) * _UNITS[unit.group(2).lower()]
    else:
        parts = raw.split(":")
        if not 1 <= len(parts) <= 4 or not all(p.isdigit() for p in parts):
            raise TimeFormatError(
                f"{option}: cannot read duration {text!r} (expected [[[DD:]HH:]MM:]SS, "
                f"a number with s/m/h/d, or INFINITY)")
        seconds = 0.0
        for value, scale in zip(reversed(parts), (1, 60, 3600, 86400)):
            seconds += int(value) * scale
    if seconds <= 0:
        raise TimeFormatError(f"{option}: duration {text!r} must be positive")
    return seconds


def parse_time(text: str, now: datetime, *, option: str = "time") -> datetime:
    """An absolute UTC time from ``text`` relative to ``now`` (see the module doc)."""
    raw = text.strip()
    if raw.lower() == "now":
        return now
    if raw[:1] in ("+", "-"):
        seconds = parse_duration(raw[1:], option=option)
        if seconds == INFINITE:
            raise TimeFormatError(f"{option}: a time cannot be {raw[0]}INFINITY")
        return now + timedelta(seconds=seconds if raw[0] == "+" else -seconds)
    clock = _CLOCK_RE.match(raw)
    if clock:
        return _clock_time(clock, raw, now, option)
    try:
        value = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise TimeFormatError(
            f"{option}: cannot read time {text!r} (expected HH[:MM[:SS]][_MO[/DD[/YY]]], "
            f"+DURATION, -DURATION, now, or ISO 8601)") from None
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value


def _clock_time(match: re.Match[str], raw: str, now: datetime, option: str) -> datetime:
    hour, minute, second, month, day, year = match.groups()
    now = now.astimezone(timezone.utc)
    explicit_date = month is not None
    y = int(year) if year else now.year
    if year and len(year) == 2:
        y += 2000
    try:
        value = datetime(y, int(month) if month else now.month, int(day) if day else now.day,
                         int(hour), int(minute or 0), int(second or 0), tzinfo=timezone.utc)
    except ValueError as err:
        raise TimeFormatError(f"{option}: invalid time {raw!r} ({err})") from None
    if not explicit_date and value < now:
        value += timedelta(days=1)  # a clock time already past today means tomorrow
    return value


def format_duration(seconds: float | None) -> str:
    """``[-][D:]HH:MM:SS`` as Maui prints durations; INFINITY; ``-`` for None."""
    if seconds is None:
        return "-"
    if seconds == INFINITE:
        return "INFINITY"
    total = int(round(abs(seconds)))
    sign = "-" if seconds < 0 and total else ""
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    body = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{sign}{days}:{body}" if days else f"{sign}{body}"


def format_time(value: datetime | None) -> str:
    """``Sat Nov 21 21:03:04`` (UTC) as showq prints times; ``-`` for None."""
    if value is None:
        return "-"
    return value.astimezone(timezone.utc).strftime("%a %b %d %H:%M:%S")


def iso(value: datetime | None) -> str | None:
    """ISO 8601 for JSON output (None stays None)."""
    return None if value is None else value.astimezone(timezone.utc).isoformat()


def json_seconds(seconds: float | None) -> float | str | None:
    """Seconds for JSON: INFINITY as the string ``"INFINITY"`` (JSON has no infinity)."""
    if seconds is None:
        return None
    return "INFINITY" if seconds == INFINITE else round(seconds, 3)
