"""The grid map: submitting identities -> local accounts, per resource manager.

As with Globus's ``grid-mapfile``, each line maps one identity (an X.509
distinguished name, or any identity string the submitter presents) to one or
more local accounts; the first is the default.  Lines before any ``[rm]``
section apply to every resource manager; an identity listed in a section uses
that section's accounts on that resource manager instead.  An identity in no
applicable line is refused with :class:`Unauthorized`.  See
``config/grid-mapfile.example`` and ``grid_mapfile.lark`` for the syntax.

Pure code: only :meth:`GridMap.load` reads a file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from lark import Lark, Token, Transformer
from lark.exceptions import (
    UnexpectedCharacters,
    UnexpectedEOF,
    UnexpectedInput,
    UnexpectedToken,
    VisitError,
)

from grid_tasks.security.errors import GridMapError, Unauthorized

_GRAMMAR = Path(__file__).with_name("grid_mapfile.lark")
# POSIX-portable user names as useradd accepts them (optionally ending in '$').
_ACCOUNT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?$")
ALL_RMS = None  # the section key of lines that apply to every resource manager


@dataclass(frozen=True)
class GridMapEntry:
    """One line: ``identity`` may use ``accounts`` on ``rm`` (None: on every RM)."""

    identity: str
    accounts: tuple[str, ...]
    rm: str | None
    line: int


@dataclass(frozen=True)
class LocalAccount:
    """The result of authorization: run as ``name`` on ``rm`` for ``identity``."""

    name: str
    identity: str
    rm: str
    allowed: tuple[str, ...]  # every account this identity may use on this RM
    line: int  # grid map line that granted it

    def to_dict(self) -> dict[str, Any]:
        return {"account": self.name, "identity": self.identity, "rm": self.rm,
                "allowed": list(self.allowed), "line": self.line}


@dataclass
class GridMap:
    """A parsed grid map.  Build with :meth:`parse` or :meth:`load`."""

    source: str = "<string>"
    entries: list[GridMapEntry] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str, source: str = "<string>") -> "GridMap":
        """Parse grid map text; :class:`GridMapError` with line and column if malformed."""
        tree = _parse_tree(text, source)
        try:
            return cls(source, _Build(text, source).transform(tree))
        except VisitError as exc:  # lark wraps what the transformer raises
            if isinstance(exc.orig_exc, GridMapError):
                raise exc.orig_exc from None
            raise

    @classmethod
    def load(cls, path: str | Path) -> "GridMap":
        """Read and parse a grid map file."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = getattr(exc, "strerror", None) or str(exc)
            raise GridMapError(f"cannot read grid map: {why}", source=str(path)) from None
        return cls.parse(text, str(path))

    def entry_for(self, identity: str, rm: str) -> GridMapEntry | None:
        """The line that governs ``identity`` on ``rm``: its section's, else the global one."""
        found: GridMapEntry | None = None
        for entry in self.entries:
            if entry.identity != identity:
                continue
            if entry.rm == rm:
                return entry
            if entry.rm is ALL_RMS:
                found = entry
        return found

    def authorize(self, identity: str, rm: str, account: str | None = None) -> LocalAccount:
        """The local account ``identity`` runs as on ``rm``.

        ``account`` asks for a specific one of the mapped accounts (default: the
        first).  Raises :class:`Unauthorized` for an unmapped identity or an
        account it may not use.
        """
        entry = self.entry_for(identity, rm)
        if entry is None:
            raise Unauthorized(f"identity {identity!r} is not in the grid map "
                               f"{self.source} for resource manager {rm!r}",
                               identity=identity, rm=rm)
        if account is not None and account not in entry.accounts:
            raise Unauthorized(f"identity {identity!r} may not use account {account!r} on "
                               f"{rm!r} (allowed: {', '.join(entry.accounts)}; "
                               f"{self.source}:{entry.line})", identity=identity, rm=rm)
        return LocalAccount(account or entry.accounts[0], identity, rm, entry.accounts,
                            entry.line)

    def sections(self) -> list[str]:
        """Resource managers that have a section of their own."""
        return sorted({e.rm for e in self.entries if e.rm is not None})

    def identities(self) -> list[str]:
        return sorted({e.identity for e in self.entries})

    def unknown_rms(self, known: set[str] | list[str]) -> list[str]:
        """Sections naming resource managers not in ``known`` (likely typos)."""
        return [rm for rm in self.sections() if rm not in set(known)]

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source,
                "entries": [{"identity": e.identity, "accounts": list(e.accounts),
                             "rm": e.rm, "line": e.line} for e in self.entries]}


@lru_cache(maxsize=1)
def _parser() -> Lark:
    return Lark(_GRAMMAR.read_text(), parser="lalr", lexer="contextual",
                propagate_positions=True, maybe_placeholders=False)


def _parse_tree(text: str, source: str) -> Any:
    try:
        return _parser().parse(text if text.endswith("\n") or not text else text + "\n")
    except UnexpectedInput as exc:
        raise _syntax_error(exc, text, source) from None


def _syntax_error(exc: UnexpectedInput, text: str, source: str) -> GridMapError:
    line, column = getattr(exc, "line", None), getattr(exc, "column", None)
    if isinstance(exc, UnexpectedCharacters):
        char = text[exc.pos_in_stream] if 0 <= exc.pos_in_stream < len(text) else "?"
        why = _unexpected_char(char, exc.allowed or set())
    elif isinstance(exc, UnexpectedToken):
        why = _unexpected_token(exc.token, exc.expected, _before(text, line, column))
    elif isinstance(exc, UnexpectedEOF):
        why = "unexpected end of file"
    else:  # pragma: no cover - lark has no other kinds
        why = "syntax error"
    if line is None or line < 1:
        line, column = _end_position(text)
    return GridMapError(why, source=source, line=line, column=column, text=text)


def _unexpected_char(char: str, allowed: set[str]) -> str:
    if char == '"':
        return "unterminated quoted identity (a closing \" is missing on this line)"
    if "RM_NAME" in allowed:
        return f"bad section name at {char!r}: use [rm] with letters, digits, '_' and '-'"
    if "_RBRACKET" in allowed:
        return f"expected ']' to close the section header, found {char!r}"
    if "ACCOUNT" in allowed:
        return f"expected a local account name, found {char!r}"
    return f"unexpected {char!r}"


def _before(text: str, line: int | None, column: int | None) -> str:
    """The text of ``line`` before ``column`` (what was read before the error)."""
    lines = text.splitlines()
    if line is None or column is None or not 1 <= line <= len(lines):
        return ""
    return lines[line - 1][: column - 1].strip()


def _unexpected_token(token: Token, expected: set[str], before: str) -> str:
    found = "end of line" if token.type in {"_NL", "$END"} else repr(str(token))
    if before.startswith("[") and before.endswith("]"):
        return f"unexpected {found} after the section header (put entries on their own lines)"
    if before.endswith(",") and "ACCOUNT" in expected:
        return f"expected an account name after ',', found {found}"
    if "_RBRACKET" in expected:
        return f"expected ']' to close the section header, found {found}"
    if "RM_NAME" in expected:
        return f"expected a resource manager name in [rm], found {found}"
    if "ACCOUNT" in expected and token.type == "_NL":
        return "identity without a local account: write '\"<identity>\" account[,account...]'"
    if "ACCOUNT" in expected:
        return f"expected a local account name, found {found}"
    if "_COMMA" in expected or "_NL" in expected:
        return f"unexpected {found} after the accounts (separate accounts with ',')"
    return f"unexpected {found}"


def _end_position(text: str) -> tuple[int, int]:
    lines = text.splitlines() or [""]
    return len(lines), len(lines[-1]) + 1


class _Build(Transformer):
    """Parse tree -> entries, with the semantic checks that need positions."""

    def __init__(self, text: str, source: str) -> None:
        super().__init__()
        self.text, self.source = text, source

    def _error(self, why: str, tok: Token, key: str | None = None) -> GridMapError:
        return GridMapError(why, source=self.source, line=tok.line, column=tok.column,
                            text=self.text, key=key)

    def start(self, children: list[Any]) -> list[GridMapEntry]:
        entries: list[GridMapEntry] = []
        rm: str | None = ALL_RMS
        sections: dict[str, int] = {}
        seen: dict[tuple[str, str | None], int] = {}
        for kind, tok, value in children:
            if kind == "section":
                if value in sections:
                    raise self._error(f"section [{value}] already began on line "
                                      f"{sections[value]}", tok, key=value)
                sections[value] = tok.line
                rm = value
                continue
            identity, accounts = value
            if (identity, rm) in seen:
                where = f"[{rm}]" if rm else "the global part"
                raise self._error(f"identity {identity!r} already mapped in {where} on "
                                  f"line {seen[identity, rm]}", tok, key=identity)
            seen[identity, rm] = tok.line
            entries.append(GridMapEntry(identity, accounts, rm, tok.line))
        return entries

    def section(self, children: list[Token]) -> tuple[str, Token, str]:
        return ("section", children[0], str(children[0]))

    def entry(self, children: list[Any]) -> tuple[str, Token, tuple[str, tuple[str, ...]]]:
        (tok, identity), accounts = children
        return ("entry", tok, (identity, accounts))

    def identity(self, children: list[Token]) -> tuple[Token, str]:
        tok = children[0]
        if tok.type == "BARE":
            return tok, str(tok)
        value = re.sub(r"\\(.)", r"\1", str(tok)[1:-1]).strip()
        if not value:
            raise self._error("empty identity", tok)
        return tok, value

    def accounts(self, children: list[Token]) -> tuple[str, ...]:
        names: list[str] = []
        for tok in children:
            name = str(tok)
            if not _ACCOUNT_RE.match(name):
                raise self._error(f"{name!r} is not a valid local account name (letters, "
                                  "digits, '_', '.', '-'; at most 32 characters)", tok,
                                  key=name)
            if name in names:
                raise self._error(f"account {name!r} listed twice", tok, key=name)
            names.append(name)
        return tuple(names)
