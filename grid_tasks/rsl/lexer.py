"""Hand-written RSL scanner, feeding lark's LALR parser.

RSL's lexical rules are context dependent in ways a plain regular lexer cannot
express: a literal directly followed by ``$`` and a variable reference's
closing ``)`` directly followed by a literal or ``$`` both mean an *implicit*
concatenation, and the ``^c...c`` form lets the writer pick the quote
character.  So this scanner tracks variable-reference parentheses itself and
injects ``CONCAT`` tokens, as the Globus flex scanner does.

Deviation from Globus: ``\\r``, ``\\f`` and ``\\v`` count as whitespace too, so
CRLF files do not leave a carriage return at the end of unquoted values.
"""

from __future__ import annotations

import re
from typing import Iterator, NamedTuple

from grid_tasks.rsl.errors import GramError, RSLError

#: Deepest parenthesis nesting accepted; deeper input is refused (BAD_RSL)
#: so that no later recursive walk can exhaust the Python stack.
MAX_DEPTH = 100

_WS = " \t\n\r\f\v"
UNQUOTED_FIRST = re.compile(r"[^ \t\n\r\f\v+&|=!<>()\"'^*$#?~]")
UNQUOTED = re.compile(r"[^ \t\n\r\f\v+&|=!<>()\"'^*$#?~][^ \t\n\r\f\v=!<>()\"'^*$#?~]*\Z")

# Leading whitespace is folded into every match: one regex call per token.
_TOKEN = re.compile(
    r"""
    [ \t\n\r\f\v]*
    (?:
     (?P<lit>[^ \t\n\r\f\v+&|=!<>()"'^*$\#?~][^ \t\n\r\f\v=!<>()"'^*$\#?~]*)
    |(?P<comment>\(\*)
    |(?P<lp>\()
    |(?P<rp>\))
    |(?P<op>!=|<=|>=|[=<>&|+\#])
    |(?P<var>\$)
    |(?P<quote>["'])
    |(?P<user>\^)
    |(?P<end>\Z)
    )
    """,
    re.VERBOSE,
)

_OP_TYPES = {
    "=": "EQ",
    "!=": "NEQ",
    "<": "LT",
    "<=": "LTEQ",
    ">": "GT",
    ">=": "GTEQ",
    "&": "AND",
    "|": "OR",
    "+": "MULTI",
    "#": "CONCAT",
}


class RawToken(NamedTuple):
    """A scanned token: type name, text value, 1-based line and column.

    The scanner itself yields plain tuples in this layout (cheaper to build);
    this named form documents it and serves lark's reference parser.
    """

    type: str
    value: str
    line: int
    column: int


class _Scanner:
    """One scan over one text; keeps line bookkeeping and the variable stack."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.line = 1
        self.line_start = 0  # offset of the first character of the current line
        self.depth = 0
        self.var_stack: list[int] = []  # open-paren count per open variable reference

    def where(self, pos: int) -> tuple[int, int]:
        return self.line, pos - self.line_start + 1

    def advance_lines(self, start: int, end: int) -> None:
        """Account for newlines in text[start:end]."""
        count = self.text.count("\n", start, end)
        if count:
            self.line += count
            self.line_start = self.text.rindex("\n", start, end) + 1

    def error(self, message: str, pos: int) -> RSLError:
        line, column = self.where(pos)
        return RSLError(message, code=GramError.BAD_RSL, line=line, column=column)

    def quoted(self, start: int, body: int, delim: str) -> tuple[str, int]:
        """Scan a quoted literal whose body starts at ``body``; doubled delimiters escape."""
        text = self.text
        parts: list[str] = []
        i = body
        while True:
            j = text.find(delim, i)
            if j < 0:
                raise self.error(f"unterminated quoted string (delimiter {delim!r})", start)
            parts.append(text[i:j])
            if text.startswith(delim, j + 1):
                parts.append(delim)
                i = j + 2
                continue
            return "".join(parts), j + 1

    def comment(self, start: int, body: int) -> int:
        """Skip a ``(* ... *)`` comment; return the offset after it."""
        close = self.text.find("*)", body)
        if close < 0:
            raise self.error("unterminated comment '(*'", start)
        self.advance_lines(start, close + 2)
        return close + 2

    def quoted_literal(self, kind: str, start: int, end: int) -> tuple[str, int]:
        """Scan ``"..."``, ``'...'`` or ``^c...c`` opened at ``start``; ``end`` follows the opener."""
        if kind == "user":
            if end >= len(self.text):
                raise self.error("'^' must be followed by a quote character", start)
            delim, body = self.text[end], end + 1
        else:
            delim, body = self.text[start], end
        value, after = self.quoted(start, body, delim)
        self.advance_lines(start, after)
        return value, after

    def open_paren(self, pos: int) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(f"parentheses nested deeper than {MAX_DEPTH}", pos)
        if self.var_stack:
            self.var_stack[-1] += 1

    def close_paren(self, end: int) -> bool:
        """Book-keep a ')'; True when it closes a variable reference enjambed with a value."""
        self.depth -= 1
        if not self.var_stack:
            return False
        self.var_stack[-1] -= 1
        if self.var_stack[-1] > 0:
            return False
        self.var_stack.pop()
        nxt = self.text[end : end + 1]
        return nxt == "$" or (nxt != "" and UNQUOTED_FIRST.match(nxt) is not None)

    def tokens(self) -> Iterator[tuple[str, str, int, int]]:
        """(type, value, line, column) tuples, ending with a ``$END`` token."""
        text = self.text
        pos = 0
        match = _TOKEN.match
        while True:
            m = match(text, pos)
            if m is None:
                bad = len(text) - len(text[pos:].lstrip(_WS))
                self.advance_lines(pos, bad)
                raise self.error(f"unexpected character {text[bad]!r}", bad)
            kind = m.lastgroup
            start = m.start(kind)
            if start > pos and "\n" in text[pos:start]:
                self.advance_lines(pos, start)
            end = m.end()
            line, column = self.line, start - self.line_start + 1
            if kind == "lit":
                yield ("STRING", m.group(kind), line, column)
                if text.startswith("$", end):
                    yield ("CONCAT", "#", line, end - self.line_start + 1)
            elif kind == "lp":
                self.open_paren(start)
                yield ("LPAR", "(", line, column)
            elif kind == "rp":
                if self.depth == 0:
                    raise self.error("unbalanced ')'", start)
                enjambed = self.close_paren(end)
                yield ("RPAR", ")", line, column)
                if enjambed:
                    yield ("CONCAT", "#", line, column + 1)
            elif kind == "op":
                op = m.group(kind)
                yield (_OP_TYPES[op], op, line, column)
            elif kind == "var":
                self.var_stack.append(0)
                yield ("VARSTART", "$", line, column)
            elif kind == "end":
                yield ("$END", "", line, column)
                return
            elif kind == "comment":
                end = self.comment(start, end)
            else:  # a quoted literal, "..." '...' or ^c...c
                value, end = self.quoted_literal(kind, start, end)
                yield ("STRING", value, line, column)
            pos = end


def scan(text: str) -> Iterator[tuple[str, str, int, int]]:
    """Tokens of ``text`` as (type, value, line, column), the last one ``$END``.

    Raises :class:`RSLError` (BAD_RSL) on a lexical error.
    """
    return _Scanner(text).tokens()


def is_unquoted_literal(value: str) -> bool:
    """True when ``value`` can be written without quotes and re-read unchanged."""
    return UNQUOTED.match(value) is not None
