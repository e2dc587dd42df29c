"""maui.cfg's syntax: the lark grammar turns text into positioned statements.

maui.cfg is line-oriented, so a syntax error costs only its own logical line: the
reader reports every broken line of a file in one run instead of stopping at the first.
Pure code, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from grid_tasks.maui.cfg.model import MauiConfigError, MauiConfigErrors

_GRAMMAR = Path(__file__).with_name("maui_cfg.lark")


@dataclass(frozen=True)
class Item:
    """One word after the parameter name; ``key`` is set for ``KEY=VALUE`` words."""

    text: str  # the whole word as written (for KEY=VALUE: "KEY=VALUE")
    line: int
    column: int
    key: str | None = None
    value: str = ""
    value_column: int = 0


@dataclass(frozen=True)
class Statement:
    """One logical line: ``NAME[index] item item ...``."""

    name: str
    index: str | None
    line: int
    column: int
    index_column: int
    items: tuple[Item, ...]


class _ToStatements(Transformer):
    """Parse tree -> list of :class:`Statement`, keeping every position."""

    def start(self, children: list[Statement]) -> list[Statement]:
        return list(children)

    def statement(self, children: list[Any]) -> Statement:
        head: Token = children[0]
        name, index, index_column = _split_head(head)
        items = tuple(_item(tok) for tok in children[1:])
        return Statement(name, index, head.line, head.column, index_column, items)


def _split_head(head: Token) -> tuple[str, str | None, int]:
    text = str(head)
    if "[" not in text:
        return text, None, 0
    name, _, rest = text.partition("[")
    inner = rest[:-1]
    stripped = inner.strip()
    column = head.column + len(name) + 1 + (len(inner) - len(inner.lstrip()))
    return name, stripped, column


def _item(tok: Token) -> Item:
    text = str(tok)
    if tok.type == "STRING":
        return Item(text[1:-1], tok.line, tok.column, value=text[1:-1],
                    value_column=tok.column + 1)
    if tok.type == "PAIR":
        key, _, value = text.partition("=")
        return Item(text, tok.line, tok.column, key=key, value=value,
                    value_column=tok.column + len(key) + 1)
    return Item(text, tok.line, tok.column, value=text, value_column=tok.column)


@lru_cache(maxsize=1)
def _parser() -> Lark:
    return Lark(_GRAMMAR.read_text(encoding="utf-8"), parser="lalr", lexer="contextual",
                propagate_positions=False, maybe_placeholders=False)


#: Past this many errors in one file, reading stops (the rest would be noise).
MAX_ERRORS = 50


def parse_statements(text: str, source: str = "<string>") -> list[Statement]:
    """The statements of a maui.cfg text, untyped; syntax errors raise MauiConfigError."""
    statements, errors = statements_and_errors(text, source)
    if errors:
        raise combined(errors)
    return statements


def statements_and_errors(text: str, source: str) -> tuple[list[Statement],
                                                               list[MauiConfigError]]:
    """Every statement that parses, and one error per line that does not.

    maui.cfg is line-oriented, so after a syntax error the offending logical line is
    blanked (its newlines kept, so every position stays true) and parsing starts again.
    """
    if not text.endswith("\n"):
        text += "\n"  # a final backslash continuation still needs its newline
    errors: list[MauiConfigError] = []
    work = text
    while True:
        try:
            tree = _parser().parse(work)
        except UnexpectedInput as exc:
            error = _syntax_error(exc, work, source)
            error.text = text
            errors.append(error)
            blanked = _blank_line(work, error.line or 1)
            if blanked == work or len(errors) >= MAX_ERRORS:
                return [], errors
            work = blanked
            continue
        return _ToStatements().transform(tree), errors


def _blank_line(text: str, line: int) -> str:
    """``text`` with the logical line holding physical ``line`` turned into spaces."""
    lines = text.split("\n")
    if not 1 <= line <= len(lines):
        return text
    first = last = line - 1
    while first > 0 and lines[first - 1].rstrip(" \t\f\r").endswith("\\"):
        first -= 1
    while last < len(lines) - 1 and lines[last].rstrip(" \t\f\r").endswith("\\"):
        last += 1
    for index in range(first, last + 1):
        lines[index] = " " * len(lines[index])
    return "\n".join(lines)


def combined(errors: list[MauiConfigError]) -> MauiConfigError:
    """The one error to raise: itself when alone, else all of them in file order."""
    if len(errors) == 1:
        return errors[0]
    ordered = sorted(errors, key=lambda e: (e.line or 0, e.column or 0))
    return MauiConfigErrors(ordered)


def _syntax_error(exc: UnexpectedInput, text: str, source: str) -> MauiConfigError:
    line, column = getattr(exc, "line", None), getattr(exc, "column", None)
    if not isinstance(line, int) or line < 1:
        line, column = text.count("\n") or 1, 1
    return MauiConfigError(_syntax_message(exc, text), source=source, line=line,
                           column=column, code="SYNTAX", text=text)


def _syntax_message(exc: UnexpectedInput, text: str) -> str:
    """Say what went wrong in the terms of maui.cfg, not of the grammar."""
    if isinstance(exc, UnexpectedCharacters):
        char = text[exc.pos_in_stream] if exc.pos_in_stream < len(text) else ""
        if char == "\\":
            return "a backslash must end the line (it continues the statement)"
        if char == '"':
            return "unterminated quoted string"
        if _at_line_start(text, exc.pos_in_stream):
            return f"expected a parameter name, got {char!r}"
        return f"unexpected character {char!r}"
    if isinstance(exc, UnexpectedToken) and exc.token.type != "$END":
        if _at_line_start(text, exc.token.start_pos or 0):
            return f"expected a parameter name, got {str(exc.token)!r}"
        return f"unexpected {str(exc.token)!r}"
    return "unexpected end of file"


def _at_line_start(text: str, pos: int) -> bool:
    start = text.rfind("\n", 0, pos) + 1
    return text[start:pos].strip() == ""
