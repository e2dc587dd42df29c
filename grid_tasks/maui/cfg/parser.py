"""Reading maui.cfg: the lark grammar gives statements, the schema gives them types.

Pure code: no I/O except :func:`load_maui_config`, which reads the one file it is given.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from grid_tasks.maui.cfg.model import MauiConfig, MauiConfigError, MauiConfigWarning, Setting
from grid_tasks.maui.cfg.params import (
    ALIASES,
    LEGACY_SR_PARAMETERS,
    OBJECT_PARAMETERS,
    PARAMETERS,
    ObjectParam,
    Param,
)
from grid_tasks.maui.cfg.types import Str, ValueProblem, ValueType

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


def parse_statements(text: str, source: str = "<string>") -> list[Statement]:
    """The statements of a maui.cfg text, untyped; syntax errors raise MauiConfigError."""
    if not text.endswith("\n"):
        text += "\n"  # a final backslash continuation still needs its newline
    try:
        tree = _parser().parse(text)
    except UnexpectedInput as exc:
        raise _syntax_error(exc, text, source) from None
    return _ToStatements().transform(tree)


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


class _Reader:
    """Types the statements of one file into a :class:`MauiConfig`."""

    def __init__(self, text: str, source: str) -> None:
        self.text = text
        self.source = source
        self.config = MauiConfig(source=source)
        self.sr_names: dict[str, str] = {}

    # --- diagnostics ----------------------------------------------------------------

    def error(self, message: str, line: int, column: int, key: str | None = None,
              code: str = "VALUE") -> MauiConfigError:
        return MauiConfigError(message, source=self.source, line=line, column=column,
                               code=code, key=key, text=self.text)

    def warn(self, message: str, line: int, column: int) -> None:
        self.config.warnings.append(MauiConfigWarning(self.source, line, column, message))

    # --- statements -----------------------------------------------------------------

    def read(self, statements: list[Statement]) -> MauiConfig:
        for st in statements:
            self.statement(st)
        self.apply_sr_names()
        return self.config

    def statement(self, st: Statement) -> None:
        upper = st.name.upper()
        canonical = ALIASES.get(upper, upper)
        known = canonical in PARAMETERS or canonical in OBJECT_PARAMETERS \
            or canonical in LEGACY_SR_PARAMETERS
        if not known:
            self.unknown(st)
            return
        if st.name != upper:
            # Maui itself matches names exactly, so this line would be lost on real Maui.
            self.warn(f"parameter {st.name!r} read as {upper}; Maui matches parameter "
                      f"names case-sensitively, write it in upper case", st.line, st.column)
        if canonical in OBJECT_PARAMETERS:
            self.object_statement(st, OBJECT_PARAMETERS[canonical])
        elif canonical in LEGACY_SR_PARAMETERS:
            self.legacy_sr(st, LEGACY_SR_PARAMETERS[canonical])
        else:
            self.plain(st, PARAMETERS[canonical])

    def unknown(self, st: Statement) -> None:
        names = list(PARAMETERS) + list(OBJECT_PARAMETERS) + list(ALIASES)
        close = difflib.get_close_matches(st.name.upper(), names, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        self.warn(f"unknown parameter {st.name!r} ignored{hint}", st.line, st.column)

    def plain(self, st: Statement, param: Param) -> None:
        self.check_index(st)
        value, line, column = self.typed_words(st, param.type, param.name)
        setting = Setting(value, line, column)
        if st.index is not None:
            self.config.indexed.setdefault(param.name, {})[st.index] = setting
            return
        previous = self.config.settings.get(param.name)
        if previous is not None:
            self.warn(f"{param.name} set again; this overrides line {previous.line}",
                      st.line, st.column)
        self.config.settings[param.name] = setting

    def typed_words(self, st: Statement, vtype: ValueType, name: str) -> tuple[Any, int, int]:
        """Type the words after a plain parameter name; returns (value, line, column)."""
        items = st.items
        if not items:
            end = st.column + len(st.name) + (len(st.index) + 2 if st.index is not None else 0)
            raise self.error(f"{name} needs a value ({vtype.describe()})", st.line, end,
                             key=name, code="MISSING_VALUE")
        if not vtype.multi and len(items) > 1:
            extra = items[1]
            raise self.error(f"{name} takes one value ({vtype.describe()}); "
                             f"unexpected {extra.text!r}", extra.line, extra.column, key=name)
        words = [it.text if it.key is not None else it.value for it in items]
        joined = " ".join(words)
        try:
            return vtype.parse(joined), items[0].line, items[0].column
        except ValueProblem as exc:
            line, column = _locate(items, words, exc.offset)
            raise self.error(f"bad value for {name}: {exc.message}", line, column,
                             key=name) from None

    def check_index(self, st: Statement) -> None:
        """A '[' right after the head means the index had spaces or brackets in it."""
        if st.index is None and st.items and st.items[0].text.startswith("["):
            first = st.items[0]
            if (first.line, first.column) != (st.line, st.column + len(st.name)):
                return  # a value that merely starts with '[' (Maui's class lists do)
            raise self.error(f"bad index for {st.name.upper()}: write {st.name.upper()}[name] "
                             f"with one word between the brackets", first.line, first.column,
                             key=st.name.upper(), code="BAD_INDEX")

    def object_statement(self, st: Statement, param: ObjectParam) -> None:
        self.check_index(st)
        if not st.index:
            raise self.error(f"{param.name} needs an object name: {param.name}[name] KEY=VALUE",
                             st.line, st.column + len(st.name), key=param.name,
                             code="MISSING_INDEX")
        entry = self.config.objects.setdefault(param.name, {}).setdefault(st.index, {})
        for item in st.items:
            if self.pair(param, item, entry):
                self.config.positions[(param.name, st.index, item.key.upper())] = \
                    (item.line, item.column)  # type: ignore[union-attr]

    def pair(self, param: ObjectParam, item: Item, entry: dict[str, Any]) -> bool:
        """Type one ``KEY=VALUE`` into ``entry``; False when the key was ignored."""
        if item.key is None:
            raise self.error(f"{param.name} expects KEY=VALUE pairs, got {item.text!r}",
                             item.line, item.column, key=param.name, code="EXPECTED_PAIR")
        key = item.key.upper()
        vtype = param.keys.get(key)
        if vtype is None:
            close = difflib.get_close_matches(key, list(param.keys), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            self.warn(f"unknown {param.name} key {item.key!r} ignored{hint}",
                      item.line, item.column)
            return False
        if item.value == "":
            raise self.error(f"missing value for {key} ({vtype.describe()})", item.line,
                             item.value_column, key=key, code="MISSING_VALUE")
        try:
            entry[key] = vtype.parse(item.value)
        except ValueProblem as exc:
            raise self.error(f"bad value for {param.name} key {key}: {exc.message}",
                             item.line, item.value_column + exc.offset, key=key) from None
        return True

    def legacy_sr(self, st: Statement, key: str) -> None:
        """Maui 3.0 ``SR<KEY>[i] value`` lines feed ``SRCFG[i]``."""
        self.check_index(st)
        if st.index is None:
            raise self.error(f"{st.name.upper()} needs a reservation index: "
                             f"{st.name.upper()}[0] VALUE", st.line, st.column + len(st.name),
                             key=st.name.upper(), code="MISSING_INDEX")
        if key == "NAME":
            value, _, _ = self.typed_words(st, Str(), "SRNAME")
            self.sr_names[st.index] = value
            return
        vtype = OBJECT_PARAMETERS["SRCFG"].keys[key]
        value, _, _ = self.typed_words(st, vtype, st.name.upper())
        self.config.objects.setdefault("SRCFG", {}).setdefault(st.index, {})[key] = value

    def apply_sr_names(self) -> None:
        table = self.config.objects.get("SRCFG", {})
        for index, name in self.sr_names.items():
            keys = table.pop(index, {})
            table.setdefault(name, {}).update(keys)


def _locate(items: tuple[Item, ...], words: list[str], offset: int) -> tuple[int, int]:
    """Map an offset in the space-joined words back to a line and column."""
    start = 0
    for item, word in zip(items, words):
        if offset <= start + len(word):
            base = item.column if item.key is not None else item.value_column
            return item.line, base + max(0, offset - start)
        start += len(word) + 1
    last = items[-1]
    return last.line, last.column


def parse_maui_config(text: str, source: str = "<string>") -> MauiConfig:
    """Read maui.cfg text.  Unknown parameters and keys become warnings; a syntax error
    or a wrong value raises :class:`MauiConfigError` with its line and column."""
    statements = parse_statements(text, source)
    return _Reader(text, source).read(statements)


def load_maui_config(path: str | Path) -> MauiConfig:
    """Read a maui.cfg file; a missing or unreadable file raises MauiConfigError."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MauiConfigError(f"cannot read {path}: {exc}", source=str(path),
                              code="UNREADABLE") from None
    return parse_maui_config(text, str(path))
