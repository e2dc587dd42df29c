"""Node lists in the compact form clusters write them: ``n[001-100]``, ``a[1-3,7],b5``.

Pure (no I/O): the topology reads node ranges with it and the scale harness
(``grid-tasks worker --harness --nodes 'n[001-100]'``) names the identities it serves.
A range keeps the width of its first bound (``n[001-100]`` gives ``n001`` ... ``n100``);
a list is split at the commas outside brackets.  Bad input raises
:class:`HostlistError` naming the expression and the part at fault.
"""

from __future__ import annotations

import re
from typing import Any

from grid_tasks.errors import GridTasksError

#: One bracketed group at most per name: ``prefix[ranges]suffix``.
_GROUP = re.compile(r"^([^\[\]]*)\[([^\[\]]*)\]([^\[\]]*)$")
#: Expansions larger than this are refused (a typo like ``n[1-1000000]``).
MAX_NAMES = 100_000


class HostlistError(GridTasksError, ValueError):
    """A node list that cannot be expanded; the message names the part at fault."""


def split_top(expression: str) -> list[str]:
    """``expression`` split at the commas that are not inside brackets."""
    parts, depth, current = [], 0, []
    for ch in expression:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts]


def expand(expression: str) -> list[str]:
    """Every name of ``expression``, in the order written; duplicates refused."""
    names: list[str] = []
    for part in split_top(expression):
        if not part:
            raise HostlistError(f"node list {expression!r}: an empty entry")
        names += _expand_one(expression, part)
        if len(names) > MAX_NAMES:
            raise HostlistError(f"node list {expression!r}: more than {MAX_NAMES} names")
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise HostlistError(f"node list {expression!r}: {name!r} named twice")
        seen.add(name)
    return names


def _expand_one(expression: str, part: str) -> list[str]:
    if "[" not in part and "]" not in part:
        return [part]
    match = _GROUP.match(part)
    if match is None:
        raise HostlistError(f"node list {expression!r}: {part!r} is not NAME[RANGES]SUFFIX "
                            "(one bracketed group, e.g. n[001-100])")
    prefix, ranges, suffix = match.groups()
    out: list[str] = []
    for item in ranges.split(","):
        out += [f"{prefix}{number}{suffix}" for number in _numbers(expression, item.strip())]
    return out


def _numbers(expression: str, item: str) -> list[str]:
    low, sep, high = item.partition("-")
    if not low.isdigit() or (sep and not high.isdigit()):
        raise HostlistError(f"node list {expression!r}: {item!r} is not N or N-M "
                            "(whole numbers)")
    if not sep:
        return [low]
    first, last = int(low), int(high)
    if last < first:
        raise HostlistError(f"node list {expression!r}: range {item!r} runs backwards")
    if last - first >= MAX_NAMES:
        raise HostlistError(f"node list {expression!r}: range {item!r} is too long")
    width = len(low)
    return [str(n).zfill(width) for n in range(first, last + 1)]


def compress(names: list[str]) -> str:
    """A short expression :func:`expand` turns back into ``names`` (same order):
    runs of consecutive numbers with one prefix and width become one range."""
    parts: list[list[Any] | str] = []  # [prefix, width, first, last] or a plain name
    for name in names:
        match = _NUMBERED.match(name)
        if match is None:
            parts.append(name)
            continue
        prefix, digits = match.groups()
        number, width = int(digits), len(digits)
        last = parts[-1] if parts else None
        if isinstance(last, list) and last[0] == prefix and last[1] == width \
                and last[3] == number - 1:
            last[3] = number
        else:
            parts.append([prefix, width, number, number])
    return ",".join(_render(p) for p in parts)


_NUMBERED = re.compile(r"^(.*?)(\d+)$")


def _render(part: list[Any] | str) -> str:
    if isinstance(part, str):
        return part
    prefix, width, first, last = part
    if first == last:
        return f"{prefix}{str(first).zfill(width)}"
    return f"{prefix}[{str(first).zfill(width)}-{str(last).zfill(width)}]"
