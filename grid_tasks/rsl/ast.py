"""The RSL syntax tree: immutable dataclasses that remember where they came from.

Positions (``line``, ``column``, 1-based) are excluded from equality and
hashing, so a tree re-parsed from its own unparsed text compares equal to the
original.  Quoting style is not kept either: ``"ls"`` and ``ls`` are the same
literal, as they are for a Globus job manager.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Union


class RelOp(str, Enum):
    """Relation operators."""

    EQ = "="
    NEQ = "!="
    LT = "<"
    LTEQ = "<="
    GT = ">"
    GTEQ = ">="


class BoolOp(str, Enum):
    """Prefix operators of a boolean specification."""

    AND = "&"
    OR = "|"
    MULTI = "+"


def canonical_attribute(name: str) -> str:
    """The comparison key of an attribute name: case and underscores ignored.

    GRAM compares ``maxWallTime``, ``max_wall_time`` and ``MAXWALLTIME`` equal.
    """
    return name.replace("_", "").lower()


@dataclass(frozen=True)
class Literal:
    """A string value, quoted or not in the source."""

    value: str
    line: int = field(default=0, compare=False, repr=False)
    column: int = field(default=0, compare=False, repr=False)


@dataclass(frozen=True)
class Variable:
    """A substitution reference ``$(NAME)`` or ``$(NAME default)``."""

    name: str
    default: "Value | None" = None
    line: int = field(default=0, compare=False, repr=False)
    column: int = field(default=0, compare=False, repr=False)


@dataclass(frozen=True)
class Concat:
    """Concatenation of two or more simple values (``a # $(B)`` or ``$(B)/x``)."""

    parts: tuple["Literal | Variable", ...]
    line: int = field(default=0, compare=False, repr=False)
    column: int = field(default=0, compare=False, repr=False)


@dataclass(frozen=True)
class Sequence:
    """A parenthesised, nested value sequence ``(a b (c d))``."""

    items: tuple["Value", ...]
    line: int = field(default=0, compare=False, repr=False)
    column: int = field(default=0, compare=False, repr=False)


Value = Union[Literal, Variable, Concat, Sequence]


@dataclass(frozen=True)
class Relation:
    """``attribute op value...``; ``values`` is the relation's top-level sequence."""

    attribute: str
    op: RelOp
    values: tuple[Value, ...]
    line: int = field(default=0, compare=False, repr=False)
    column: int = field(default=0, compare=False, repr=False)

    @property
    def key(self) -> str:
        """The attribute's comparison key (see :func:`canonical_attribute`)."""
        return canonical_attribute(self.attribute)


@dataclass(frozen=True)
class Boolean:
    """``&``, ``|`` or ``+`` applied to one or more parenthesised specifications."""

    op: BoolOp
    operands: tuple["Spec", ...]
    line: int = field(default=0, compare=False, repr=False)
    column: int = field(default=0, compare=False, repr=False)


Spec = Union[Relation, Boolean]

__all__ = [
    "BoolOp",
    "Boolean",
    "Concat",
    "Literal",
    "RelOp",
    "Relation",
    "Sequence",
    "Spec",
    "Value",
    "Variable",
    "canonical_attribute",
]
