"""MIL text to AST: a LALR(1) lark parser whose callbacks build the tree while parsing.

Building the tree inline keeps parsing iterative (hostile nesting cannot overflow the
Python stack) and linear in the length of the text.  Every failure, including bytes
that are not UTF-8, becomes a :class:`MILError` with a line and column.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from pathlib import Path

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from .errors import MILError
from .nodes import (Binary, Bool, BoolOp, Call, Float, Int, Match, Node, Str, Unary, Var,
                    children, depth)
from .regex import compile_pattern

# Generated Python nests a few brackets per MIL level and CPython's parser stops at 200;
# chains of and/or/xor are flat, so this only limits genuinely nested expressions.
MAX_DEPTH = 48
# Longer text is refused outright: parsing is linear, but at ~100k tokens/s a
# multi-megabyte "query" would still hold a worker for many seconds.
MAX_LENGTH = 200_000

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\"}
_ESCAPE_RE = re.compile(r"\\(.)", re.DOTALL)
_WORD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

_TERMINAL_NAMES = {
    "OR": "'or'", "XOR": "'xor'", "AND": "'and'", "NOT": "'not'", "MOD": "'mod'",
    "MATCH": "'match'", "FUNC2": "'max' or 'min'", "FUNC1": "'int' or 'float'",
    "TRUE": "'true'", "FALSE": "'false'", "COMPOP": "a comparison operator",
    "PLUS": "'+'", "MINUS": "'-'", "STAR": "'*'", "SLASH": "'/'", "TILDE": "'~'",
    "NUMBER": "a number", "STRING": "a string constant", "VAR": "a $variable",
    "LPAR": "'('", "RPAR": "')'", "COMMA": "','", "$END": "the end of the query",
}


def _unescape(body: str) -> str:
    # Unknown escapes keep their backslash so regular expressions like "\d" read naturally.
    return _ESCAPE_RE.sub(lambda m: _ESCAPES.get(m.group(1), m.group(0)), body)


def _source_offset(body: str, offset: int) -> int:
    """Where character ``offset`` of ``_unescape(body)`` was written in ``body``."""
    produced, i = 0, 0
    while i < len(body) and produced < offset:
        if body[i] == "\\" and i + 1 < len(body) and body[i + 1] in _ESCAPES:
            i += 2
        else:
            i += 1
        produced += 1
    return i


def _pos(token: Token) -> dict[str, int]:
    return {"line": token.line or 0, "column": token.column or 0}


class _BuildError(Exception):
    """Raised by callbacks; turned into a MILError once the text and source are at hand."""

    def __init__(self, message: str, token: Token, shift: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.line = token.line or 0
        self.column = (token.column or 0) + shift


def _nested(node: Node, token: Token) -> Node:
    """Record ``node``'s depth on it, refusing over-deep trees while still parsing."""
    level = 1 + max(getattr(child, "_mil_depth", 1) for child in children(node))
    if level > MAX_DEPTH:
        raise _BuildError(f"query is nested more than {MAX_DEPTH} levels deep", token)
    object.__setattr__(node, "_mil_depth", level)  # not a field: invisible to == and repr
    return node


class _Builder(Transformer):
    """Lark callbacks: parse-tree pieces to :mod:`nodes` dataclasses (stateless)."""

    def _error(self, message: str, token: Token) -> _BuildError:
        return _BuildError(message, token)

    def number(self, items: list[Token]) -> Node:
        tok = items[0]
        raw = str(tok)
        try:
            return self._number(raw, tok)
        except ValueError:
            raise self._error(f"number constant {raw[:20]!r} is too long", tok) from None

    def _number(self, raw: str, tok: Token) -> Node:
        if raw[:2] in ("0x", "0X"):
            return Int(int(raw, 16), **_pos(tok))
        if any(ch in raw for ch in ".eE"):
            value = float(raw)
            if math.isinf(value):
                raise self._error(f"float constant {raw[:20]!r} is out of range", tok)
            return Float(value, **_pos(tok))
        if raw.startswith("0") and len(raw) > 1:
            if any(ch in raw for ch in "89"):
                raise self._error(f"invalid octal constant {raw!r} (digits 0-7 only)", tok)
            return Int(int(raw, 8), **_pos(tok))
        return Int(int(raw), **_pos(tok))

    def string(self, items: list[Token]) -> Node:
        return Str(_unescape(str(items[0])[1:-1]), **_pos(items[0]))

    def true(self, items: list[Token]) -> Node:
        return Bool(True, **_pos(items[0]))

    def false(self, items: list[Token]) -> Node:
        return Bool(False, **_pos(items[0]))

    def var(self, items: list[Token]) -> Node:
        return Var(str(items[0])[1:], **_pos(items[0]))

    def match(self, items: list) -> Node:
        keyword, subject, pattern_tok = items
        body = str(pattern_tok)[1:-1]
        vetted = compile_pattern(_unescape(body))
        if vetted.problem:
            shift = 0 if vetted.offset is None else 1 + _source_offset(body, vetted.offset)
            raise _BuildError(vetted.problem, pattern_tok, shift)
        return _nested(Match(subject, _unescape(body), **_pos(keyword)), keyword)

    def call(self, items: list) -> Node:
        return _nested(Call(str(items[0]), tuple(items[1:]), **_pos(items[0])), items[0])

    def unary_op(self, items: list) -> Node:
        return _nested(Unary(str(items[0]), items[1], **_pos(items[0])), items[0])

    def not_op(self, items: list) -> Node:
        return _nested(Unary("not", items[1], **_pos(items[0])), items[0])

    def comparison(self, items: list) -> Node:
        left, op, right = items
        return _nested(Binary("!=" if op == "<>" else str(op), left, right, **_pos(op)), op)

    def _fold(self, items: list) -> Node:
        result = items[0]
        for op, operand in zip(items[1::2], items[2::2]):
            result = _nested(Binary(str(op), result, operand, **_pos(op)), op)
        return result

    sum = _fold
    product = _fold

    def _chain(self, items: list) -> Node:
        return _nested(BoolOp(str(items[1]), tuple(items[0::2]), **_pos(items[1])), items[1])

    or_expr = _chain
    xor_expr = _chain
    and_expr = _chain


_GRAMMAR = Path(__file__).with_name("mil.lark")


def _decode(text: str | bytes, source: str) -> str:
    if isinstance(text, str):
        return text
    if isinstance(text, (bytes, bytearray, memoryview)):
        data = bytes(text)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            before = data[: exc.start].decode("utf-8", "replace")
            line = before.count("\n") + 1
            column = len(before) - (before.rfind("\n") + 1) + 1
            raise MILError(f"query is not valid UTF-8 (byte {exc.start})", source=source,
                           line=line, column=column) from None
    raise MILError(f"a MIL query must be str or bytes, not {type(text).__name__}",
                   source=source)


@lru_cache(maxsize=1)
def _parser() -> Lark:
    return Lark(_GRAMMAR.read_text(encoding="utf-8"), parser="lalr", lexer="contextual",
                transformer=_Builder())


def parse(text: str | bytes, *, source: str = "<query>") -> Node:
    """Parse MIL text (str, or UTF-8 bytes) into an AST; raise :class:`MILError` if invalid."""
    query = _decode(text, source)
    if len(query) > MAX_LENGTH:
        raise MILError(f"query is longer than {MAX_LENGTH:,} characters", source=source,
                       line=1, column=1)
    if not query.strip():
        raise MILError("empty query", source=source, line=1, column=1, text=query)
    try:
        tree = _parser().parse(query)
    except UnexpectedInput as exc:
        raise _syntax_error(exc, query, source) from None
    except _BuildError as exc:
        raise MILError(exc.message, source=source, line=exc.line, column=exc.column,
                       text=query) from None
    if depth(tree) > MAX_DEPTH:
        raise MILError(f"query is nested more than {MAX_DEPTH} levels deep", source=source,
                       line=1, column=1, text=query)
    return tree


def _syntax_error(exc: UnexpectedInput, query: str, source: str) -> MILError:
    line, column = exc.line, exc.column
    at_end = isinstance(exc, UnexpectedEOF) or (
        isinstance(exc, UnexpectedToken) and exc.token.type == "$END")
    if at_end or not isinstance(line, int) or line < 1:
        line = query.count("\n") + 1
        column = len(query) - (query.rfind("\n") + 1) + 1
    if isinstance(exc, UnexpectedCharacters):
        message = _bad_character(query, exc.pos_in_stream)
    elif isinstance(exc, UnexpectedToken):
        message = _unexpected(exc.token, exc.expected)
    elif isinstance(exc, UnexpectedEOF):
        message = _unexpected(None, exc.expected)
    else:  # pragma: no cover - lark has no other UnexpectedInput kinds today
        message = "syntax error"
    return MILError(message, source=source, line=line, column=column, text=query)


def _bad_character(query: str, pos: int) -> str:
    char = query[pos] if 0 <= pos < len(query) else ""
    if char == '"':
        return "unterminated string constant"
    word = _WORD_RE.match(query, pos)
    if word:
        return f"unknown word {word.group(0)!r} (attributes are written $name)"
    if char == "$":
        return "'$' must be followed by an attribute name"
    return f"unexpected character {char!r}"


def _unexpected(token: Token | None, expected: set[str] | None) -> str:
    if token is None or token.type == "$END":
        found = "end of query"
    else:
        found = repr(str(token)[:30])
    wanted = sorted({_TERMINAL_NAMES.get(name, name) for name in (expected or ())})
    if not wanted:
        return f"unexpected {found}"
    return f"unexpected {found}; expected {', '.join(wanted)}"
