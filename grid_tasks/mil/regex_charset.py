"""The characters one regex item can match, as sorted code-point intervals (over-approximated).

The backtracking guard (:mod:`grid_tasks.mil.regex_ambiguity`) only asks whether two
items *may* match a common character; answering "yes" too often refuses a harmless
pattern, answering "no" wrongly would let a slow one through.  So every set here is
a superset of the truth: ASCII is exact, while ``\\d``, ``\\w``, ``\\s`` and anything
case-insensitive are widened to all of non-ASCII.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

Intervals = tuple[tuple[int, int], ...]

MAX_CHAR = 0x10FFFF
ALL: Intervals = ((0, MAX_CHAR),)
_NON_ASCII = (128, MAX_CHAR)


def normal(spans: Iterable[tuple[int, int]]) -> Intervals:
    """Sorted, merged intervals."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def _complement(spans: Intervals) -> Intervals:
    out, start = [], 0
    for lo, hi in spans:
        if lo > start:
            out.append((start, lo - 1))
        start = hi + 1
    if start <= MAX_CHAR:
        out.append((start, MAX_CHAR))
    return tuple(out)


def _ascii_class(pattern: str) -> Intervals:
    regex = re.compile(pattern)
    return normal((i, i) for i in range(128) if regex.match(chr(i)))


_DIGIT, _SPACE, _WORD = _ascii_class(r"\d"), _ascii_class(r"\s"), _ascii_class(r"\w")
_CATEGORIES = {
    "CATEGORY_DIGIT": normal((*_DIGIT, _NON_ASCII)),
    "CATEGORY_NOT_DIGIT": _complement(_DIGIT),
    "CATEGORY_SPACE": normal((*_SPACE, _NON_ASCII)),
    "CATEGORY_NOT_SPACE": _complement(_SPACE),
    "CATEGORY_WORD": normal((*_WORD, _NON_ASCII)),
    "CATEGORY_NOT_WORD": _complement(_WORD),
}
_LETTERS = ((65, 90), (97, 122))


def _ignore_case(spans: Intervals) -> Intervals:
    """Add the other case of ASCII letters; any letter or non-ASCII may fold to non-ASCII."""
    extra = []
    for lo, hi in spans:
        for a, b in _LETTERS:
            low, high = max(lo, a), min(hi, b)
            if low <= high:
                extra.append((low ^ 32, high ^ 32))
                extra.append(_NON_ASCII)  # K folds to the Kelvin sign, s to the long s...
        if hi >= 128:
            extra.append(_NON_ASCII)
    return normal((*spans, *extra))


def _in_set(items: Any) -> Intervals:
    spans: list[tuple[int, int]] = []
    negate = False
    for op, av in items:
        name = str(op)
        if name == "NEGATE":
            negate = True
        elif name == "LITERAL":
            spans.append((av, av))
        elif name == "RANGE":
            spans.append((av[0], av[1]))
        elif name == "CATEGORY":
            spans.extend(_CATEGORIES.get(str(av), ALL))
        else:  # anything unforeseen: everything (safe side)
            spans.extend(ALL)
    result = normal(spans)
    return _complement(result) if negate else result


def item_chars(op: Any, av: Any, ignore_case: bool) -> Intervals:
    """The characters a one-character item (LITERAL, NOT_LITERAL, ANY, IN) may match."""
    name = str(op)
    if name == "LITERAL":
        spans: Intervals = ((av, av),)
    elif name == "NOT_LITERAL":
        spans = _complement(((av, av),))
    elif name == "IN":
        spans = _in_set(av)
    else:  # ANY (with or without DOTALL), and anything unforeseen
        spans = ALL
    return _ignore_case(spans) if ignore_case else spans


def overlap(sets: list[Intervals]) -> bool:
    """Do any two of ``sets`` share a character?  (A sweep over all their intervals.)"""
    spans = sorted((lo, hi, owner) for owner, chars in enumerate(sets) for lo, hi in chars)
    reach, reach_owner = -1, -1
    for lo, hi, owner in spans:
        if lo <= reach and owner != reach_owner:
            return True
        if hi > reach:
            reach, reach_owner = hi, owner
    return False
