"""Regular expressions for ``match()``: compiled once, vetted for runaway backtracking.

Patterns are Python ``re`` syntax and are searched for anywhere in the subject, as
POSIX ``regexec`` does.  Python's matcher backtracks, so a pattern that repeats
something able to match the same text in two ways (``(a+)+``, ``(a|a)*``,
``(?:a?a?)+``, ``(?:a|aa)+``, ``(.*)*``) or able to match nothing (``(a?)*``) can take
exponential time on a near-miss: 21 characters against ``(?:a?a?)+$`` took over 20 s.
So is a chain of three or more repetitions that can read the same text
(``a*a*a*a*a*a*a*b``: 30 characters took 12 s), whose time grows as a high power of
the subject's length.  Such patterns are refused with the offset of the repetition at
fault; see :mod:`grid_tasks.mil.regex_ambiguity` for the (conservative) rules.  A
possessive repetition (``(a+)++``) never backtracks into itself: it is the way around.
Two repetitions in a row (``.*a.*b``) stay allowed: quadratic in the subject, searched
from every start, so attribute values of a few kB at most are assumed.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Iterator, NamedTuple

from grid_tasks.mil.regex_ambiguity import TooComplex, ambiguous_repeat
from grid_tasks.mil.regex_positions import quantifiers

try:  # CPython 3.11+ keeps the pattern parser here; 3.10 and older in sre_parse
    from re import _parser as _sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover
    import sre_parse as _sre_parse  # type: ignore[no-redef]

_REPEATS = {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}


class Vetted(NamedTuple):
    """A ``match()`` pattern: compiled, or refused with why and where (offset in it, if known)."""

    regex: re.Pattern[str] | None
    problem: str | None = None
    offset: int | None = None


def _children(op: str, av: Any) -> list[Any]:
    if op in _REPEATS:
        return [av[2]]
    if op == "SUBPATTERN":
        return [av[3]]
    if op == "BRANCH":
        return list(av[1])
    if op in ("ASSERT", "ASSERT_NOT"):
        return [av[1]]
    if op == "ATOMIC_GROUP":
        return [av]
    if op == "GROUPREF_EXISTS":
        return [branch for branch in av[1:] if branch is not None]
    return []


def _repeats(items: Any) -> Iterator[tuple[int, int, int]]:
    """(id, min, max) of every repetition's arguments, inner first: the order of their quantifiers."""
    for op, av in items:
        for child in _children(str(op), av):
            yield from _repeats(child)
        if str(op) in _REPEATS:
            yield id(av), av[0], av[1]


def _offset(pattern: str, parsed: Any, repeat: int) -> int | None:
    """Offset in ``pattern`` of the repetition whose arguments have id ``repeat`` (None if unsure)."""
    tree = list(_repeats(parsed))
    scanned = quantifiers(pattern, _sre_parse.MAXREPEAT)
    if [(low, high) for _, low, high in tree] != [(low, high) for _, low, high in scanned]:
        return None
    for (ident, _, _), (offset, _, _) in zip(tree, scanned):
        if ident == repeat:
            return offset
    return None


@lru_cache(maxsize=512)
def compile_pattern(pattern: str) -> Vetted:
    """The compiled pattern, or why it is refused and the offset of the culprit."""
    try:
        compiled = re.compile(pattern)
        parsed = _sre_parse.parse(pattern)
    except re.error as exc:
        return Vetted(None, f"invalid regular expression: {exc.msg}", exc.pos)
    except (RecursionError, OverflowError, ValueError, MemoryError) as exc:
        return Vetted(None, f"invalid regular expression: {type(exc).__name__}")
    try:
        found = ambiguous_repeat(parsed)
    except RecursionError:
        return Vetted(None, "regular expression nested too deeply to vet for backtracking")
    except TooComplex as exc:
        return Vetted(None, str(exc))
    if found is None:
        return Vetted(compiled)
    repeat, why = found
    return Vetted(None, f"regular expression {why}: it could take exponential time; write it "
                        "so that text can match only one way (e.g. 'a+' for '(a+)+'), or make "
                        "the repetition possessive (e.g. '(a+)++')",
                  _offset(pattern, parsed, repeat))
