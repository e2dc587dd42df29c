"""Regular expressions for ``match()``: compiled once, vetted for runaway backtracking.

Patterns are Python ``re`` syntax and are searched for anywhere in the subject, as
POSIX ``regexec`` does.  A pattern that repeats without bound something which itself
repeats without bound (``(a+)+``, ``(x*y*)*``) or alternatives that may start alike
(``(a|a)*``, ``(.|a)*``) can take exponential time on a near-miss, so it is refused.
This is a conservative heuristic: it catches the classic shapes, not every slow
pattern, and it refuses a few harmless ones (use bounded repeats or atomic groups).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

try:  # CPython 3.11+ keeps the pattern parser here; 3.10 and older in sre_parse
    from re import _parser as _sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover
    import sre_parse as _sre_parse  # type: ignore[no-redef]

_REPEATS = {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}


def _unbounded(op: Any, av: Any) -> bool:
    return str(op) in _REPEATS and av[1] == _sre_parse.MAXREPEAT


def _has_nested_unbounded(items: Any, inside_unbounded: bool) -> bool:
    stack = [(items, inside_unbounded)]
    while stack:
        seq, inside = stack.pop()
        for op, av in seq:
            name = str(op)
            if name in _REPEATS:
                unbounded = _unbounded(op, av)
                if unbounded and inside and name != "POSSESSIVE_REPEAT":
                    return True
                stack.append((av[2], inside or unbounded))
            elif name == "SUBPATTERN":
                stack.append((av[-1], inside))
            elif name == "BRANCH":
                if inside and _ambiguous(av[1]):
                    return True
                stack.extend((branch, inside) for branch in av[1])
            elif name in ("ASSERT", "ASSERT_NOT"):
                stack.append((av[1], inside))
            elif name == "ATOMIC_GROUP":
                stack.append((av, False))
    return False


def _ambiguous(branches: Any) -> bool:
    """Could two alternatives start the same way?  (Conservative: only distinct literals pass.)"""
    firsts = []
    for branch in branches:
        if not branch or str(branch[0][0]) != "LITERAL":
            return True
        firsts.append(branch[0][1])
    return len(set(firsts)) < len(firsts)


@lru_cache(maxsize=512)
def compile_pattern(pattern: str) -> tuple[re.Pattern[str] | None, str | None]:
    """``(compiled, None)`` for a usable pattern, ``(None, reason)`` otherwise."""
    try:
        compiled = re.compile(pattern)
        parsed = _sre_parse.parse(pattern)
    except re.error as exc:
        return None, f"invalid regular expression: {exc.msg}"
    except (RecursionError, OverflowError, ValueError, MemoryError) as exc:
        return None, f"invalid regular expression: {type(exc).__name__}"
    if _has_nested_unbounded(parsed, False):
        return None, ("regular expression repeats a repetition or an ambiguous alternative "
                      "without bound (like '(a+)+' or '(a|a)*'); it could take exponential time")
    return compiled, None
