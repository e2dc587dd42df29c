"""The values of the token store (see :mod:`grid_tasks.legion.tokens`): claims, tokens,
refusals, and the few encodings the client shares with the Lua scripts.

Kept apart from the store so that each file stays readable; the store's values are
re-exported by :mod:`grid_tasks.legion.tokens`, the module to import them from.  The
mark of an enacted grid reservation (:data:`ENACTED`) is read from here by the RMs'
services, which need neither the store nor the collection.
"""

from __future__ import annotations

import itertools
import math
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from grid_tasks.errors import GridTasksError


#: Key of a grid reservation's ``resources`` set by the broker once it confirmed the
#: reservation's tokens (the enactment completed); see :func:`enacted`.  Here, with
#: the token values, not in the collection: the RMs' services mark it and should not
#: load the collection's MIL compiler for a name.
ENACTED = "tokens_confirmed"


def enacted(row: Any) -> bool:
    """Whether grid reservation ``row`` is known complete: its broker confirmed the tokens
    after every RM accepted.  Without the mark the broker may have died in between, so
    the row is only as good as its token in the store (never restored from SQL)."""
    return bool((row.resources or {}).get(ENACTED))


class RefusalReason(str, Enum):
    """Why a token operation was refused."""

    FULL = "full"            # capacity would be exceeded at some instant
    UNKNOWN = "unknown"      # no capacity registered for the resource
    EXPIRED = "expired"      # a token to keep or confirm has expired
    GONE = "gone"            # a token to keep or confirm was released (or never existed)
    DUPLICATE = "duplicate"  # a token id is already in use


class TokenRefused(GridTasksError):
    """The token store refused a reservation; nothing was changed."""

    def __init__(self, reason: RefusalReason, subject: str, index: int = 0,
                 peak: int = 0, capacity: int = 0) -> None:
        self.reason, self.subject, self.index = reason, subject, index
        self.peak, self.capacity = peak, capacity
        super().__init__(self._describe())

    def _describe(self) -> str:
        if self.reason is RefusalReason.FULL:
            return (f"resource {self.subject} refused claim #{self.index}: {self.peak} of "
                    f"{self.capacity} processors already claimed in the interval")
        if self.reason is RefusalReason.UNKNOWN:
            return (f"resource {self.subject} has no registered capacity (unknown resource, "
                    "or Redis lost its state and the store was not restored)")
        return f"token {self.subject} is {self.reason.value}"

    def to_dict(self) -> dict[str, Any]:
        return {"reason": self.reason.value, "subject": self.subject, "index": self.index,
                "peak": self.peak, "capacity": self.capacity, "message": str(self)}


class TokenInvalid(GridTasksError):
    """A token presented to start something is expired, released or unknown."""

    def __init__(self, token_id: str, reason: str) -> None:
        self.token_id, self.reason = token_id, reason
        super().__init__(f"token {token_id} cannot start anything: {reason}")


@dataclass(frozen=True)
class Claim:
    """``procs`` processors of ``resource`` over ``[start, end)``."""

    resource: str
    start: float
    end: float
    procs: int

    def __post_init__(self) -> None:
        if not self.resource or "|" in self.resource or "\0" in self.resource:
            raise ValueError(f"bad resource name {self.resource!r}")
        if not self.end > self.start:
            raise ValueError(f"claim on {self.resource}: end {self.end} not after "
                             f"start {self.start}")
        if self.procs < 1:
            raise ValueError(f"claim on {self.resource}: procs must be >= 1")
        # normalised, and this claim's part of a reserve request formatted, once: the
        # enactor passes the same claims again, and float repr is dear on the hot path
        start, end, procs = float(self.start), float(self.end), int(self.procs)
        wire = f"\0{self.resource}\0{start!r}\0{end!r}\0{procs}\0{_at(end)}\0"
        for name, value in (("start", start), ("end", end), ("procs", procs),
                            ("_wire", wire)):
            object.__setattr__(self, name, value)


def _at(t: float) -> str:
    """A claim end's position in the index, as ``at`` in tokens_common.lua computes it:
    whole seconds offset to exactly 13 digits, clamped (times before 0 share the first
    position: reads stay exact, they filter afterwards).  Sent ready with each claim:
    the script would pay a number-to-text conversion per claim."""
    if not t < 9e12:
        return "9999999999999"
    if t < -1e12:
        return "1000000000000"
    return str(min(max(math.floor(t) + 10**12, 10**12), 9999999999999))


@dataclass(frozen=True)
class Token:
    """A claim held in the store.  ``expires_ms`` is None once confirmed."""

    id: str
    resource: str
    start: float
    end: float
    procs: int
    owner: str
    group: str
    size: int
    expires_ms: int | None

    @property
    def confirmed(self) -> bool:
        return self.expires_ms is None

    @property
    def claim(self) -> Claim:
        return Claim(self.resource, self.start, self.end, self.procs)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "resource": self.resource, "start": self.start,
                "end": self.end, "procs": self.procs, "owner": self.owner,
                "group": self.group, "size": self.size, "confirmed": self.confirmed,
                "expires_ms": self.expires_ms}

    @classmethod
    def parse(cls, token_id: str, raw: bytes | str) -> "Token":
        text = raw.decode() if isinstance(raw, bytes) else raw
        res, start, end, procs, expiry, owner, group, size = text.split("|", 7)
        exp = int(float(expiry))
        return cls(token_id, res, float(start), float(end), int(procs), owner, group,
                   int(size), None if exp == 0 else exp)


def _check_name(kind: str, value: str) -> None:
    if not value or "|" in value or "\0" in value:
        raise GridTasksError(f"bad {kind} {value!r}: must be non-empty without '|' or NUL")


def new_token_id() -> str:
    """A fresh random token id."""
    return secrets.token_hex(8)


_ALNUM = str.maketrans("-_", "xy")


class _IdSource:
    """Token ids: a random stem per process (renewed in a forked child) plus a counter;
    cheaper than urandom, or even getpid, per id."""

    def __init__(self) -> None:
        self.reset()
        os.register_at_fork(after_in_child=self.reset)

    def reset(self) -> None:
        # 48 random bits: unique per process in practice, and short (every byte of an
        # id is hashed and compared in the index, the claims hash and the expiry entries)
        # (letters and digits only: an id starting with "-" reads as an option on a CLI)
        stem = secrets.token_urlsafe(6).translate(_ALNUM)
        self.stem, self.count = stem, itertools.count(1)

    def take(self, n: int) -> list[str]:
        # one counter step per call, the claims of a call told apart by a suffix
        base = f"{self.stem}{next(self.count):x}."
        if n <= len(_SUFFIXES):
            return [base + suffix for suffix in _SUFFIXES[:n]]
        return [f"{base}{i}" for i in range(n)]


_SUFFIXES = tuple(str(i) for i in range(64))


_IDS = _IdSource()


def _tokens(ids: Sequence[str], claims: Sequence[Claim], owner: str,
            expiry: int | None) -> list[Token]:
    """New tokens, built by filling ``__dict__``: the frozen dataclass ``__init__`` sets
    each field through ``object.__setattr__``, ~1 us per token on the hot path.  The
    fields are every field of :class:`Token` (a test checks the two agree)."""
    new, set_dict = object.__new__, object.__setattr__
    # the fields in Token's order; copying a filled dict beats filling an empty one
    template = {"id": None, "resource": None, "start": None, "end": None, "procs": None,
                "owner": owner, "group": owner, "size": len(claims), "expires_ms": expiry}
    made = []
    for token_id, c in zip(ids, claims):  # Claim normalised its numbers already
        token = new(Token)
        d = template.copy()
        d["id"] = token_id
        d["resource"] = c.resource
        d["start"] = c.start
        d["end"] = c.end
        d["procs"] = c.procs
        set_dict(token, "__dict__", d)
        made.append(token)
    return made
