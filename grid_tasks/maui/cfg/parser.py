"""Reading maui.cfg: :mod:`.syntax` gives statements, the schema gives them types.

Pure code: no I/O except :func:`load_maui_config`, which reads the one file it is given.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from grid_tasks.maui.cfg.model import MauiConfig, MauiConfigError, MauiConfigWarning, Setting
from grid_tasks.maui.cfg.params import (
    ALIASES,
    LEGACY_SR_PARAMETERS,
    OBJECT_PARAMETERS,
    PARAMETERS,
    ObjectParam,
    Param,
)
from grid_tasks.maui.cfg.syntax import (
    MAX_ERRORS,
    Item,
    Statement,
    combined,
    parse_statements,
    statements_and_errors,
)
from grid_tasks.maui.cfg.types import Str, ValueProblem, ValueType

__all__ = ["load_maui_config", "parse_maui_config", "parse_statements"]

_PERIOD_SECONDS = {"DAY": 86400, "WEEK": 7 * 86400}


class _Reader:
    """Types the statements of one file into a :class:`MauiConfig`."""

    def __init__(self, text: str, source: str) -> None:
        self.text = text
        self.source = source
        self.config = MauiConfig(source=source)
        self.sr_names: dict[str, str] = {}
        self.errors: list[MauiConfigError] = []

    # --- diagnostics ----------------------------------------------------------------

    def error(self, message: str, line: int, column: int, key: str | None = None,
              code: str = "VALUE") -> MauiConfigError:
        return MauiConfigError(message, source=self.source, line=line, column=column,
                               code=code, key=key, text=self.text)

    def warn(self, message: str, line: int, column: int) -> None:
        self.config.warnings.append(MauiConfigWarning(self.source, line, column, message))

    # --- statements -----------------------------------------------------------------

    def read(self, statements: list[Statement]) -> MauiConfig:
        """Type every statement; a wrong one is recorded and the next one read anyway."""
        for st in statements:
            try:
                self.statement(st)
            except MauiConfigError as exc:
                self.errors.append(exc)
        self.check_sr_times()
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
            try:
                kept = self.pair(param, item, entry)
            except MauiConfigError as exc:
                self.errors.append(exc)  # the other pairs of the line are still checked
                continue
            if kept:
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

    def check_sr_times(self) -> None:
        """STARTTIME and ENDTIME of a standing reservation are offsets into its PERIOD:
        a time of day for PERIOD=DAY (Maui's default), of the week for PERIOD=WEEK."""
        for index, keys in self.config.objects.get("SRCFG", {}).items():
            period = keys.get("PERIOD", "DAY")
            length = _PERIOD_SECONDS.get(period)
            for key in ("STARTTIME", "ENDTIME") if length else ():
                value = keys.get(key)
                if value is None or value < length or (key == "ENDTIME" and value == length):
                    continue
                line, column = self.config.positions.get(("SRCFG", index, key), (0, 0))
                self.errors.append(self.error(
                    f"SRCFG[{index}] {key}={_hours(value)} is past the end of its "
                    f"PERIOD={period} ({key} is an offset into the {period.lower()}, "
                    f"below {_hours(length)})", line or 1,
                    column + len(key) + 1 if line else 1, key=key, code="RANGE"))

    def apply_sr_names(self) -> None:
        table = self.config.objects.get("SRCFG", {})
        for index, name in self.sr_names.items():
            keys = table.pop(index, {})
            table.setdefault(name, {}).update(keys)


def _hours(seconds: int) -> str:
    """HH:MM:SS with hours past 24 kept as hours, as a time of day is written."""
    hours, rest = divmod(int(seconds), 3600)
    return f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"


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
    or a wrong value raises :class:`MauiConfigError` with its line and column.

    The whole file is always read: with several errors, :class:`MauiConfigErrors`
    carries every one of them (syntax and values), in file order."""
    statements, errors = statements_and_errors(text, source)
    reader = _Reader(text, source)
    config = reader.read(statements)
    errors += reader.errors
    if errors:
        raise combined(errors[:MAX_ERRORS])
    return config


def load_maui_config(path: str | Path) -> MauiConfig:
    """Read a maui.cfg file; a missing or unreadable file raises MauiConfigError."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MauiConfigError(f"cannot read {path}: {exc}", source=str(path),
                              code="UNREADABLE") from None
    return parse_maui_config(text, str(path))
