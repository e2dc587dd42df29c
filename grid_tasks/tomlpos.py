"""Positions in TOML text: what tomllib does not report (it locates syntax errors only).

:func:`syntax_error` turns a ``TOMLDecodeError`` into a ConfigError with line and
column; :func:`hostile_value_error` finds the value that made tomllib recurse too deep
or overflow an integer; :func:`locate_key` finds where a dotted key is defined, so a
semantic error (a bad value) can name its line and column too.
"""

from __future__ import annotations

import re
import tomllib

from grid_tasks.errors import ConfigError


def syntax_error(exc: tomllib.TOMLDecodeError, text: str, source: str) -> ConfigError:
    msg = str(exc)
    match = re.search(r"\(at line (\d+), column (\d+)\)", msg)
    line = column = None
    if match:
        line, column = int(match.group(1)), int(match.group(2))
        msg = msg[: match.start()].strip()
    elif "(at end of document)" in msg:
        lines = text.splitlines() or [""]
        line, column = len(lines), len(lines[-1]) + 1
        msg = msg.replace("(at end of document)", "at end of file").strip()
    return ConfigError(f"TOML syntax error: {msg}", source=source, line=line, column=column,
                       text=text)


#: Deepest array/inline-table nesting reported as the culprit of a RecursionError.
MAX_VALUE_NESTING = 100
#: TOML integers are 64-bit signed; CPython's int() also refuses over 4300 digits.
_INT64_DIGITS = 19
_DECIMAL_RUN = re.compile(r"[+-]?[0-9][0-9_]*")
_HEADER = re.compile(r"\[\[?\s*([^\]\n]*?)\s*\]")


def hostile_value_error(exc: BaseException, text: str, source: str) -> ConfigError:
    """A located ConfigError for a value tomllib could not survive."""
    found = _scan_values(text, too_deep=isinstance(exc, RecursionError))
    if found is None:
        what = "values nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        return ConfigError(f"TOML value error: {what}", source=source, text=text)
    message, pos, key = found
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return ConfigError(message, source=source, line=line, column=column, key=key or None,
                       text=text)


def _scan_values(text: str, too_deep: bool) -> tuple[str, int, str] | None:
    """First (message, offset, key) of a too-deep value or an over-long integer.

    A small lexer: it skips comments and strings, tells headers from values, and
    tracks bracket depth inside values.  Only used once tomllib has failed.
    """
    depth, in_value, key, table, line_start, i = 0, False, "", "", 0, 0
    while i < len(text):
        c = text[i]
        if c == "\n":
            in_value, line_start = in_value and depth > 0, i + 1
        elif c == "#":
            i = _line_end(text, i) - 1
        elif c in "\"'":
            i = _skip_string(text, i) - 1
        elif not in_value and c == "[" and depth == 0:
            end = _line_end(text, i)
            header = _HEADER.match(text, i, end)
            table = header.group(1) if header else ""
            i = end - 1
        elif c == "=" and depth == 0:
            in_value, key = True, text[line_start:i].strip()
        elif in_value and c in "[{":
            depth += 1
            if too_deep and depth > MAX_VALUE_NESTING:
                return (f"value nested more than {MAX_VALUE_NESTING} levels deep", i,
                        _dotted(table, key))
        elif in_value and c in "]}":
            depth = max(0, depth - 1)
        elif in_value and not too_deep and (i == 0 or not text[i - 1].isalnum()):
            m = _DECIMAL_RUN.match(text, i)
            if m and text[m.end():m.end() + 1] not in (".", "e", "E", "x", "o", "b", ":", "-"):
                digits = len(m.group().lstrip("+-").replace("_", "").lstrip("0"))
                if digits > _INT64_DIGITS:
                    return (f"integer of {digits} digits is out of range (TOML integers are "
                            "64-bit)", i, _dotted(table, key))
            i = m.end() - 1 if m else i
        i += 1
    return None


def _line_end(text: str, start: int) -> int:
    """Offset of the newline ending the line of ``start`` (or the end of the text)."""
    found = text.find("\n", start)
    return len(text) if found < 0 else found


def _skip_string(text: str, i: int) -> int:
    """Offset just past the string literal opening at ``i`` (tolerant of bad input)."""
    quote = text[i]
    if text.startswith(quote * 3, i):
        end = text.find(quote * 3, i + 3)
        return len(text) if end < 0 else end + 3
    j = i + 1
    while j < len(text) and text[j] not in (quote, "\n"):
        j += 2 if quote == '"' and text[j] == "\\" else 1
    return j + 1


def _dotted(table: str, key: str) -> str:
    return ".".join(part for part in (table, key) if part)


# --- locating keys in TOML text (tomllib reports positions only for syntax errors) ---

_KEY_PART = re.compile(r'\s*("(?:[^"\\]|\\.)*"|\'[^\']*\'|[A-Za-z0-9_-]+)\s*')


def _split_key(raw: str) -> tuple[str, ...] | None:
    """``a."b.c".d`` -> ("a", "b.c", "d"); None if not a plain dotted key."""
    parts: list[str] = []
    pos = 0
    while True:
        m = _KEY_PART.match(raw, pos)
        if not m:
            return None
        token = m.group(1)
        parts.append(token[1:-1] if token[0] in "\"'" else token)
        pos = m.end()
        if pos == len(raw):
            return tuple(parts)
        if raw[pos] != ".":
            return None
        pos += 1


def locate_key(text: str, path: tuple[str, ...]) -> tuple[int | None, int | None]:
    """1-based (line, column) where the deepest prefix of ``path`` is declared.

    Table headers and ``key = value`` lines are followed; for a key declared
    twice (a duplicate node), the last declaration wins.
    """
    table: tuple[str, ...] = ()
    best = (0, None, None)
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        if stripped.startswith("["):
            inner = stripped.lstrip("[").split("]", 1)[0]
            table = _split_key(inner) or ()
            full, column = table, indent + 1
        elif "=" in stripped:
            key = _split_key(stripped.split("=", 1)[0].rstrip())
            if key is None:
                continue
            full, column = table + key, indent + 1
        else:
            continue
        depth = _common_prefix(full, path)
        exact = depth == len(full)
        # a deeper header such as [rm.a.node.n] also declares rm.a: first one counts
        implied = depth == len(path) and depth > best[0]
        if depth > 0 and (implied or (exact and depth >= best[0])):
            best = (depth, lineno, column)
            inline = _inline_column(line, path[depth:])
            if inline is not None:
                best = (depth + 1, lineno, inline)
    return best[1], best[2]


def _common_prefix(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _inline_column(line: str, rest: tuple[str, ...]) -> int | None:
    """Column of ``rest[0] =`` inside an inline table on ``line``, if present."""
    if not rest or "{" not in line:
        return None
    m = re.search(r"[{,]\s*(" + re.escape(rest[0]) + r")\s*=", line)
    return m.start(1) + 1 if m else None
