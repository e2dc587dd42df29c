"""Value types of maui.cfg: each turns the text of one value into a Python value.

Every type is a small class with ``parse(text) -> value`` and ``format(value) -> text``
(the inverse, used by the CLI and by round-trip tests).  A bad value raises
:class:`ValueProblem` carrying the offset, inside the text, of the offending part, so
the reader can put the caret exactly under it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Iterable

#: What ``INFINITY`` means for a time value, in seconds.  Maui stores it as its largest
#: time (MAX_MTIME); an int keeps every time value comparable and JSON-friendly.
INFINITY: int = 2_140_000_000

_INT_RE = re.compile(r"[+-]?\d+")
_FLOAT_RE = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")


def _shorten(text: str, width: int = 40) -> str:
    """``text`` for a message, elided in the middle when long."""
    return text if len(text) <= width else f"{text[:20]}...{text[-12:]} ({len(text)} chars)"


class ValueProblem(Exception):
    """A value did not parse; ``offset`` is where in the value text it went wrong."""

    def __init__(self, message: str, offset: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.offset = offset


class ValueType:
    """Base of all value types.  ``multi`` types take every word after the name."""

    multi = False
    label = "value"

    def parse(self, text: str) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def format(self, value: Any) -> str:
        return str(value)

    def describe(self) -> str:
        """A short human description, used in error messages and --help tables."""
        return self.label


#: Maui keeps numbers in C ``long``s; anything wider is refused (and never handed to
#: int(), whose digit limit would escape as a bare ValueError on thousands of digits).
LONG_MAX = 2**63 - 1


def _digits_to_int(digits: str, offset: int = 0) -> int:
    """``[+-]digits`` -> int, refusing magnitudes beyond :data:`LONG_MAX`."""
    sign = "-" if digits.startswith("-") else ""
    # Leading zeros count towards int()'s digit limit too: convert without them.
    significant = digits.lstrip("+-").lstrip("0")
    if len(significant) <= len(str(LONG_MAX)) and int(significant or "0") <= LONG_MAX:
        return int(sign + (significant or "0"))
    shown = sign + significant if len(significant) <= 24 else \
        f"a {len(significant)}-digit {'negative ' if sign else ''}number"
    raise ValueProblem(f"number out of range: {shown} (Maui's limit is +-{LONG_MAX})", offset)


def _parse_int(text: str, offset: int = 0, what: str = "an integer") -> int:
    if not _INT_RE.fullmatch(text):
        raise ValueProblem(f"expected {what}, got {text!r}", offset)
    return _digits_to_int(text, offset)


class Int(ValueType):
    """A whole number, optionally bounded."""

    label = "integer"

    def __init__(self, minimum: int | None = None, maximum: int | None = None) -> None:
        self.minimum = minimum
        self.maximum = maximum

    def parse(self, text: str) -> int:
        value = _parse_int(text)
        if self.minimum is not None and value < self.minimum:
            raise ValueProblem(f"must be at least {self.minimum}, got {value}")
        if self.maximum is not None and value > self.maximum:
            raise ValueProblem(f"must be at most {self.maximum}, got {value}")
        return value

    def describe(self) -> str:
        if self.minimum is not None:
            return f"integer >= {self.minimum}"
        return "integer"


class Float(ValueType):
    """A real number, optionally bounded (Maui documents ranges such as FSDECAY's)."""

    label = "number"

    def __init__(self, minimum: float | None = None, maximum: float | None = None) -> None:
        self.minimum = minimum
        self.maximum = maximum

    def parse(self, text: str) -> float:
        if not _FLOAT_RE.fullmatch(text):
            raise ValueProblem(f"expected a number, got {text!r}")
        value = float(text)
        if math.isinf(value):
            raise ValueProblem(f"number out of range: {_shorten(text)}")
        if self.minimum is not None and value < self.minimum:
            raise ValueProblem(f"must be at least {self.minimum}, got {value}")
        if self.maximum is not None and value > self.maximum:
            raise ValueProblem(f"must be at most {self.maximum}, got {value}")
        return value

    def format(self, value: Any) -> str:
        return repr(float(value))

    def describe(self) -> str:
        if self.minimum is not None and self.maximum is not None:
            return f"number from {self.minimum} to {self.maximum}"
        if self.minimum is not None:
            return f"number >= {self.minimum}"
        return "number"


_TRUE = {"TRUE", "YES", "ON", "1"}
_FALSE = {"FALSE", "NO", "OFF", "0"}


class Bool(ValueType):
    """TRUE/FALSE (also YES/NO, ON/OFF, 1/0, any case), as Maui's boolean parameters."""

    label = "boolean"

    def parse(self, text: str) -> bool:
        upper = text.upper()
        if upper in _TRUE:
            return True
        if upper in _FALSE:
            return False
        raise ValueProblem(f"expected TRUE or FALSE, got {text!r}")

    def format(self, value: Any) -> str:
        return "TRUE" if value else "FALSE"


class Str(ValueType):
    """Any single word (a file name, a host, a credential name)."""

    label = "string"

    def parse(self, text: str) -> str:
        if text == "":
            raise ValueProblem("expected a value")
        return text


class Time(ValueType):
    """A duration: ``[[DD:]HH:]MM:SS``, plain seconds, or ``INFINITY``; -> int seconds.

    Two fields are MM:SS as the admin guide documents (Maui 3.2's own reader happens to
    take them as HH:MM; a file relying on that would be read differently here).
    """

    label = "time"

    def __init__(self, allow_negative: bool = False, minimum: int | None = None) -> None:
        self.allow_negative = allow_negative
        self.minimum = minimum  # e.g. 1 s where a zero interval would divide by zero

    def parse(self, text: str) -> int:
        value = self._parse(text)
        if self.minimum is not None and value < self.minimum:
            raise ValueProblem(f"must be at least {self.format(self.minimum)}, got {text!r}")
        return value

    def _parse(self, text: str) -> int:
        if text.upper() == "INFINITY":
            return INFINITY
        if ":" not in text:
            seconds = _parse_int(text, 0, "a time ([[DD:]HH:]MM:SS or seconds)")
            if seconds < 0 and not self.allow_negative:
                raise ValueProblem(f"a time cannot be negative, got {text!r}")
            return seconds
        parts = text.split(":")
        if len(parts) > 4:
            raise ValueProblem(f"too many ':' fields in time {text!r} (at most DD:HH:MM:SS)")
        total, offset = 0, 0
        # Maui's documented layout reads right to left: SS, MM, HH, DD.
        scales = (86400, 3600, 60, 1)[4 - len(parts):]
        for part, scale in zip(parts, scales):
            if not part.isdigit() or not part.isascii():
                raise ValueProblem(f"expected digits in time field, got {part!r}", offset)
            total += _digits_to_int(part, offset) * scale
            offset += len(part) + 1
        return total

    def format(self, value: Any) -> str:
        if value == INFINITY:
            return "INFINITY"
        if value < 0:
            return str(value)
        days, rest = divmod(int(value), 86400)
        hours, rest = divmod(rest, 3600)
        minutes, seconds = divmod(rest, 60)
        text = f"{hours:02d}:{minutes:02d}:{seconds:02d}"
        return f"{days}:{text}" if days else text

    def describe(self) -> str:
        return "time [[DD:]HH:]MM:SS"


class Choice(ValueType):
    """One keyword out of a fixed set; matched in any case, stored upper-case."""

    label = "keyword"

    def __init__(self, *choices: str) -> None:
        self.choices = tuple(c.upper() for c in choices)

    def parse(self, text: str) -> str:
        upper = text.upper()
        if upper not in self.choices:
            raise ValueProblem(f"expected one of {', '.join(self.choices)}; got {text!r}")
        return upper

    def describe(self) -> str:
        return "one of " + "|".join(self.choices)


_LIST_SPLIT = re.compile(r"[,:\s]+")


def _split(text: str, pattern: re.Pattern[str] = _LIST_SPLIT) -> list[tuple[str, int]]:
    """Words of a list with their offsets; empty items are skipped."""
    out: list[tuple[str, int]] = []
    pos = 0
    for sep in pattern.finditer(text):
        if sep.start() > pos:
            out.append((text[pos:sep.start()], pos))
        pos = sep.end()
    if pos < len(text):
        out.append((text[pos:], pos))
    return out


class List(ValueType):
    """Names separated by spaces, commas or colons -> tuple[str, ...].

    ``item`` (a :class:`Choice`) validates and upper-cases every element when given.
    """

    multi = True
    label = "list"

    def __init__(self, item: Choice | None = None, separators: str = r"[,:\s]+") -> None:
        self.item = item
        self.separators = re.compile(separators)

    def parse(self, text: str) -> tuple[str, ...]:
        words = _split(text, self.separators)
        if not words:
            raise ValueProblem("expected at least one name")
        if self.item is None:
            return tuple(word for word, _ in words)
        result = []
        for word, offset in words:
            try:
                result.append(self.item.parse(word))
            except ValueProblem as exc:
                raise ValueProblem(exc.message, offset) from None
        return tuple(result)

    def format(self, value: Iterable[str]) -> str:
        return ",".join(value)

    def describe(self) -> str:
        inner = f" of {self.item.describe()}" if self.item else ""
        return f"list{inner}"


class Throttle(ValueType):
    """A credential limit ``SOFT[,HARD]`` -> ``(soft, hard)``; hard defaults to soft.

    -1 means unlimited, as in Maui.
    """

    label = "limit"

    def parse(self, text: str) -> tuple[int, int]:
        parts = text.split(",")
        if len(parts) > 2:
            raise ValueProblem(f"expected SOFT[,HARD], got {text!r}")
        soft = _parse_int(parts[0], 0, "a limit (integer, -1 = unlimited)")
        hard = soft
        if len(parts) == 2:
            hard = _parse_int(parts[1], len(parts[0]) + 1, "a hard limit (integer)")
        for value, offset in ((soft, 0), (hard, len(parts[0]) + 1)):
            if value < -1:
                raise ValueProblem(f"a limit must be -1 (unlimited) or more, got {value}", offset)
        if hard != -1 and (soft == -1 or hard < soft):
            raise ValueProblem(f"hard limit {hard} is below soft limit {soft}", len(parts[0]) + 1)
        return (soft, hard)

    def format(self, value: Any) -> str:
        soft, hard = value
        return str(soft) if soft == hard else f"{soft},{hard}"

    def describe(self) -> str:
        return "limit SOFT[,HARD]"


@dataclass(frozen=True)
class FairshareTarget:
    """A fairshare target in percent; ``mode`` is TARGET, FLOOR (``+``), CEILING (``-``)
    or CAP (``^``), Maui's suffixes."""

    percent: float
    mode: str = "TARGET"

    @property
    def suffix(self) -> str:
        """Maui's suffix for the mode: '', '+', '-' or '^'."""
        return _FS_PREFIX.get(self.mode, "")

    def __str__(self) -> str:
        # The maui.cfg spelling ("25+"), so str() consumers see what the file said.
        number = repr(float(self.percent))
        return (number[:-2] if number.endswith(".0") else number) + self.suffix

    def to_dict(self) -> dict[str, Any]:
        return {"percent": self.percent, "mode": self.mode}


_FS_SUFFIX = {"+": "FLOOR", "-": "CEILING", "^": "CAP"}
_FS_PREFIX = {mode: suffix for suffix, mode in _FS_SUFFIX.items()}


class FsTarget(ValueType):
    """``25`` (target), ``25+`` (floor), ``25-`` (ceiling), ``25^`` (cap) -> FairshareTarget."""

    label = "fairshare target"

    def parse(self, text: str) -> FairshareTarget:
        mode = "TARGET"
        number = text
        if text and text[-1] in _FS_SUFFIX:
            mode, number = _FS_SUFFIX[text[-1]], text[:-1]
        if not _FLOAT_RE.fullmatch(number) or number.startswith(("+", "-")):
            raise ValueProblem(f"expected a percentage like 25, 25+, 25- or 25^, got {text!r}")
        percent = float(number)
        if math.isinf(percent):
            raise ValueProblem(f"number out of range: {_shorten(text)}")
        if percent > 100.0:
            raise ValueProblem(f"a fairshare target is a percentage (0-100), got {percent}")
        return FairshareTarget(percent, mode)

    def format(self, value: Any) -> str:
        return str(value)
