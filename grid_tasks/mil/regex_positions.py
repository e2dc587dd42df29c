"""Where each repetition of a regex starts in its text, to point an error at it.

``re``'s parse tree keeps no positions, so this light scanner walks the pattern the
way ``re`` tokenises it (escapes, classes, groups, comments, verbose mode) and lists
its quantifiers in source order with the offset of what each one repeats.  Its list
is used only when it agrees with the tree's repetitions one for one (same count and
bounds); otherwise the caller points at the whole pattern.
"""

from __future__ import annotations

import re

Quantifier = tuple[int, int, int]  # (offset of the repeated item, min, max)

_BRACES = re.compile(r"\{(\d*)(,(\d*))?\}")
_FLAGS_ONLY = re.compile(r"\(\?([aiLmsux]+)\)")
_SCOPED_FLAGS = re.compile(r"\(\?([aiLmsux]*)(?:-([imsx]+))?:")
_OPENERS = ("(?P<", "(?:", "(?=", "(?!", "(?<=", "(?<!", "(?>")
_ESCAPE_LENGTHS = {"x": 4, "u": 6, "U": 10}


def _escape_end(text: str, i: int) -> int:
    """End of the escape starting at ``text[i] == '\\\\'``."""
    kind = text[i + 1: i + 2]
    if kind in _ESCAPE_LENGTHS:
        return i + _ESCAPE_LENGTHS[kind]
    if kind == "N" and text[i + 2: i + 3] == "{":
        close = text.find("}", i)
        return close + 1 if close > 0 else len(text)
    if kind.isdigit():
        digits = len(text[i + 1: i + 4]) - len(text[i + 1: i + 4].lstrip("0123456789"))
        octal = digits == 3 and all(c in "01234567" for c in text[i + 1: i + 4])
        return i + 1 + (3 if octal else min(digits, 2))
    return i + 2


def _class_end(text: str, i: int) -> int:
    """End of the character class starting at ``text[i] == '['``."""
    j = i + 1
    if text[j: j + 1] == "^":
        j += 1
    if text[j: j + 1] == "]":
        j += 1
    while j < len(text):
        if text[j] == "\\":
            j = _escape_end(text, j)
        elif text[j] == "]":
            return j + 1
        else:
            j += 1
    return len(text)


def _bounds(text: str, i: int, maxrepeat: int) -> tuple[int, int, int] | None:
    """(min, max, end) of the quantifier at ``i``, or None if ``text[i]`` is a literal."""
    char = text[i]
    if char in "*+?":
        return (0 if char != "+" else 1), (1 if char == "?" else maxrepeat), i + 1
    found = _BRACES.match(text, i)
    if found is None or found.group(0) == "{}":
        return None
    low = int(found.group(1) or 0)
    high = (int(found.group(3)) if found.group(3) else maxrepeat) if found.group(2) \
        else int(found.group(1) or 0)
    return low, high, found.end()


def _group_open(text: str, i: int, verbose: bool) -> tuple[int, bool]:
    """(end of the opener, verbose inside) of the group starting at ``i``."""
    scoped = _SCOPED_FLAGS.match(text, i)
    if scoped:
        return scoped.end(), ("x" in scoped.group(1)) or (verbose and "x" not in (scoped.group(2) or ""))
    if text.startswith("(?(", i):
        close = text.find(")", i + 3)
        return (close + 1 if close > 0 else len(text)), verbose
    if text.startswith("(?P<", i):
        close = text.find(">", i)
        return (close + 1 if close > 0 else len(text)), verbose
    for opener in _OPENERS:
        if text.startswith(opener, i):
            return i + len(opener), verbose
    return i + 1, verbose


def quantifiers(text: str, maxrepeat: int) -> list[Quantifier]:
    """Every quantifier of ``text`` in source order: (offset of its item, min, max)."""
    found: list[Quantifier] = []
    groups: list[tuple[int, bool]] = []
    verbose, last, i = False, None, 0
    while i < len(text):
        char = text[i]
        if verbose and char.isspace():
            i += 1
        elif verbose and char == "#":
            end = text.find("\n", i)
            i = end + 1 if end >= 0 else len(text)
        elif text.startswith("(?#", i):
            end = text.find(")", i)
            i = end + 1 if end >= 0 else len(text)
        elif (flags := _FLAGS_ONLY.match(text, i)) is not None:
            verbose, i = verbose or "x" in flags.group(1), flags.end()
        elif text.startswith("(?P=", i):
            last, i = i, max(text.find(")", i) + 1, i + 1)
        elif char == "(":
            groups.append((i, verbose))
            i, verbose = _group_open(text, i, verbose)
            last = None
        elif char == ")" and groups:
            last, verbose = groups.pop()
            i += 1
        elif char == "|":
            last, i = None, i + 1
        elif char in "*+?{" and last is not None and (bounds := _bounds(text, i, maxrepeat)):
            low, high, i = bounds
            found.append((last, low, high))
            i += 1 if text[i: i + 1] in ("?", "+") else 0
            last = None
        elif char == "\\":
            last, i = i, _escape_end(text, i)
        elif char == "[":
            last, i = i, _class_end(text, i)
        else:
            last, i = i, i + 1
    return found
