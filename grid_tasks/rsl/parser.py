"""Parse RSL text into the syntax tree of :mod:`grid_tasks.rsl.ast`.

The grammar is ``rsl.lark`` (LALR(1), so parsing is linear and never
ambiguous); the tokens come from :mod:`grid_tasks.rsl.lexer`.  Any input ends
in a tree or an :class:`RSLError` -- lark's own exceptions never escape.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

from lark import Lark, Transformer
from lark.exceptions import LarkError, UnexpectedInput, UnexpectedToken
from lark.lexer import Lexer
from lark.parsers.lalr_analysis import Shift

from grid_tasks.rsl.ast import (
    Boolean,
    BoolOp,
    Concat,
    Literal,
    RelOp,
    Relation,
    Sequence,
    Spec,
    Value,
    Variable,
)
from grid_tasks.rsl.errors import GramError, RSLError
from grid_tasks.rsl.lexer import RawToken, scan

_GRAMMAR = Path(__file__).with_name("rsl.lark")

_TOKEN_NAMES = {
    "LPAR": "'('",
    "RPAR": "')'",
    "STRING": "a string",
    "EQ": "'='",
    "NEQ": "'!='",
    "LT": "'<'",
    "LTEQ": "'<='",
    "GT": "'>'",
    "GTEQ": "'>='",
    "AND": "'&'",
    "OR": "'|'",
    "MULTI": "'+'",
    "CONCAT": "'#'",
    "VARSTART": "'$'",
    "$END": "end of input",
}


class _LarkToken(RawToken):
    """A scanned token as lark's own loop wants it (it borrows these for ``$END``)."""

    start_pos = end_line = end_column = end_pos = None


class _ScannerLexer(Lexer):
    """Adapts :func:`scan` to lark's custom-lexer interface."""

    def __init__(self, lexer_conf: Any) -> None:  # lark passes its configuration
        pass

    def lex(self, data: str) -> Iterator[_LarkToken]:  # type: ignore[override]
        # lark only reads ``.type``; the transformer indexes the tuple
        for tok in scan(data):
            if tok[0] != "$END":
                yield _LarkToken(*tok)


_REL_OPS = {op.value: op for op in RelOp}
_BOOL_OPS = {op.value: op for op in BoolOp}


def _bad(message: str, line: int, column: int) -> RSLError:
    return RSLError(message, code=GramError.BAD_RSL, line=line, column=column)


class _ToAst(Transformer):
    """Builds the dataclass tree while lark reduces (no intermediate parse tree)."""

    def start(self, children: list[Spec]) -> Spec:
        return children[0]

    def boolean(self, children: list[Any]) -> Boolean:
        op, specs = children
        return Boolean(_BOOL_OPS[op[1]], tuple(specs), op[2], op[3])

    def spec_list(self, children: list[Any]) -> list[Spec]:
        if len(children) == 3:  # ( spec )
            return [children[1]]
        children[0].append(children[2])  # spec_list ( spec )
        return children[0]

    def relation(self, children: list[Any]) -> Relation:
        name, op, values = children
        return Relation(name[1], _REL_OPS[op[1]], tuple(values), name[2], name[3])

    def value_list(self, children: list[Any]) -> list[Value]:
        if len(children) == 1:
            return children
        children[0].append(children[1])
        return children[0]

    def sequence(self, children: list[Any]) -> Sequence:
        lpar, values, _ = children
        return Sequence(tuple(values), lpar[2], lpar[3])

    def concat(self, children: list[Any]) -> Concat:
        parts: tuple[Any, ...] = tuple(children[::2])  # drop the CONCAT tokens between
        return Concat(parts, parts[0].line, parts[0].column)

    def literal(self, children: list[Any]) -> Literal:
        tok = children[0]
        return Literal(tok[1], tok[2], tok[3])

    def variable(self, children: list[Any]) -> Variable:
        start, _, values, _ = children
        name = values[0]
        if not isinstance(name, Literal):
            raise _bad("a variable reference must start with the variable's name", start[2], start[3])
        if len(values) > 2:
            extra = values[2]
            raise _bad("a variable reference takes a name and at most one default value", extra.line, extra.column)
        default = values[1] if len(values) == 2 else None
        if isinstance(default, Sequence):
            raise _bad("a variable's default must be a single value", default.line, default.column)
        return Variable(name.value, default, start[2], start[3])


@lru_cache(maxsize=1)
def _parser() -> Lark:
    return Lark(
        _GRAMMAR.read_text(encoding="utf-8"),
        parser="lalr",
        lexer=_ScannerLexer,
        transformer=_ToAst(),
        maybe_placeholders=False,
    )


class _Driver:
    """A lean LALR(1) loop over the tables lark computed from ``rsl.lark``.

    lark's generic loop costs about twice as much per token as this one, which
    pre-resolves every action to a plain int (shift/goto) or a tuple (reduce).
    The grammar, the tables and the reduction callbacks are all lark's.
    """

    def __init__(self, lark: Lark) -> None:
        inner = lark.parser.parser.parser
        table = inner.parse_table
        callbacks = inner.callbacks
        self.start = table.start_states["start"]
        self.end = table.end_states["start"]
        self.states: dict[int, dict[str, Any]] = {}
        for state, actions in table.states.items():
            resolved: dict[str, Any] = {}
            for symbol, (action, arg) in actions.items():
                # plain str keys: lark's Token keys have a slow Python __eq__
                if action is Shift:
                    resolved[str(symbol)] = arg
                else:
                    size = len(arg.expansion)
                    # a one-child '?rule' reduces to its child: skip the call
                    passthrough = size == 1 and arg.options.expand1
                    callback = None if passthrough else self._direct(lark, arg) or callbacks[arg]
                    resolved[str(symbol)] = (size, str(arg.origin.name), callback)
            self.states[state] = resolved

    @staticmethod
    def _direct(lark: Lark, rule: Any) -> Any:
        """The transformer method itself, when lark's wrapper would add nothing.

        That is: no '?' inlining and no EBNF helper rule whose children lark
        must splice in (all terminals are named, so none is filtered out).
        """
        if rule.options.expand1 or any(sym.name.startswith("_") for sym in rule.expansion):
            return None
        return getattr(lark.options.transformer, str(rule.origin.name), None)

    def parse(self, text: str) -> Spec:
        states = self.states
        end = self.end
        state = self.start
        state_stack = [state]
        values: list[Any] = []
        for tok in scan(text):
            typ = tok[0]
            while True:
                act = states[state].get(typ)
                if act is None:
                    raise self._unexpected(tok, state, text)
                if act.__class__ is int:  # shift
                    state = act
                    state_stack.append(state)
                    values.append(tok)
                    break
                size, name, callback = act  # reduce, then goto
                if callback is None:
                    del state_stack[-1]
                else:
                    children = values[-size:]
                    del state_stack[-size:]
                    del values[-size:]
                    values.append(callback(children))
                state = states[state_stack[-1]][name]
                if state == end:  # only reachable on $END
                    return values[-1]
                state_stack.append(state)
        raise AssertionError("unreachable: $END always ends the loop")  # pragma: no cover

    def _unexpected(self, tok: tuple[str, str, int, int], state: int, text: str) -> RSLError:
        expected = sorted(_TOKEN_NAMES.get(s, s) for s in self.states[state] if s.isupper())
        hint = f"; expected {', '.join(expected)}" if expected else ""
        typ, value, line, column = tok
        what = _TOKEN_NAMES.get(typ, typ)
        if typ == "STRING":
            what += f" {value!r}"
        return _bad(f"syntax error: unexpected {what}{hint}", line, column)


@lru_cache(maxsize=1)
def _driver() -> _Driver:
    return _Driver(_parser())


def _end_position(text: str) -> tuple[int, int]:
    line = text.count("\n") + 1
    return line, len(text) - (text.rfind("\n") + 1) + 1


def _decode(data: bytes, source: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        good = data[: exc.start].decode("utf-8")
        line, column = _end_position(good)
        raise RSLError(
            f"RSL text is not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})",
            code=GramError.BAD_RSL,
            source=source,
            line=line,
            column=column,
        ) from None


def parse(text: str | bytes, *, source: str = "<string>", cache: bool = True) -> Spec:
    """Parse RSL text into a tree.

    Trees are immutable, so the last 512 distinct texts are remembered and a
    repeated text (a client resubmitting the same request) returns the same
    tree; ``cache=False`` always parses.  Raises :class:`RSLError` with code
    ``ZERO_LENGTH_RSL`` for empty input and ``BAD_RSL`` for anything that is
    not RSL, with line and column.
    """
    if isinstance(text, bytes):
        text = _decode(text, source)
    try:
        return _parse_cached(text) if cache else _parse(text)
    except RSLError as exc:
        raise exc.with_text(text, source) from None


def _parse(text: str) -> Spec:
    if not text.strip():
        raise RSLError("empty RSL", code=GramError.ZERO_LENGTH_RSL, line=1, column=1)
    return _driver().parse(text)


_parse_cached = lru_cache(maxsize=512)(_parse)


def parse_with_lark(text: str) -> Spec:
    """Parse with lark's own LALR loop (reference for tests; slower than :func:`parse`)."""
    if not text.strip():
        raise RSLError("empty RSL", code=GramError.ZERO_LENGTH_RSL, line=1, column=1)
    try:
        return _parser().parse(text)
    except RSLError:
        raise
    except UnexpectedInput as exc:
        token = getattr(exc, "token", None)
        if isinstance(exc, UnexpectedToken) and token is not None and token.type != "$END":
            raise _bad(f"syntax error: unexpected {token.type}", token.line, token.column) from None
        raise _bad("syntax error: unexpected end of input", *_end_position(text)) from None
    except LarkError as exc:  # pragma: no cover - any other lark failure still ends typed
        raise _bad(f"syntax error: {exc}", *_end_position(text)) from None
