"""MIL abstract syntax tree: frozen dataclasses that remember where they came from.

Positions (``line``, ``column``, 1-based) are excluded from equality so that
``parse(unparse(tree)) == tree`` holds although the unparser lays text out anew.
Number constants are never negative: ``-1`` is ``Unary("-", Int(1))``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

# Operator spellings used in the tree.  ``<>`` is read as ``!=``.
LOGIC_OPS = ("and", "or", "xor")
COMPARE_OPS = ("==", "!=", "<", ">", "<=", ">=")
ARITH_OPS = ("+", "-", "*", "/", "mod")
UNARY_OPS = ("not", "-", "~")
FUNCTIONS_2 = ("max", "min")
FUNCTIONS_1 = ("int", "float")


@dataclass(frozen=True)
class Node:
    """Base of every MIL node."""

    line: int = field(default=0, compare=False, kw_only=True, repr=False)
    column: int = field(default=0, compare=False, kw_only=True, repr=False)


@dataclass(frozen=True)
class Bool(Node):
    """``true`` / ``false`` (also ``TRUE``, ``True``, ``FALSE``, ``False``)."""

    value: bool


@dataclass(frozen=True)
class Int(Node):
    """An integer constant: decimal, octal (leading ``0``) or hexadecimal (``0x``)."""

    value: int


@dataclass(frozen=True)
class Float(Node):
    """A finite floating-point constant."""

    value: float


@dataclass(frozen=True)
class Str(Node):
    """A double-quoted string constant."""

    value: str


@dataclass(frozen=True)
class Var(Node):
    """``$name``: the resource attribute ``name``."""

    name: str


@dataclass(frozen=True)
class Unary(Node):
    """``not x``, ``-x`` or ``~x`` (bitwise complement of an integer)."""

    op: str
    operand: "Expr"


@dataclass(frozen=True)
class Binary(Node):
    """An arithmetic operation or a comparison between two operands."""

    op: str
    left: "Expr"
    right: "Expr"


@dataclass(frozen=True)
class BoolOp(Node):
    """``a and b and c``: one node per chain of the same logical operator."""

    op: str
    operands: tuple["Expr", ...]


@dataclass(frozen=True)
class Match(Node):
    """``match(subject, "regex")``: regular-expression search; the pattern is a constant."""

    subject: "Expr"
    pattern: str


@dataclass(frozen=True)
class Call(Node):
    """``max(a, b)``, ``min(a, b)``, ``int(x)`` or ``float(x)``."""

    func: str
    args: tuple["Expr", ...]


Expr = Union[Bool, Int, Float, Str, Var, Unary, Binary, BoolOp, Match, Call]


def children(node: Node) -> tuple[Node, ...]:
    """The direct sub-expressions of ``node``."""
    if isinstance(node, Unary):
        return (node.operand,)
    if isinstance(node, Binary):
        return (node.left, node.right)
    if isinstance(node, BoolOp):
        return node.operands
    if isinstance(node, Match):
        return (node.subject,)
    if isinstance(node, Call):
        return node.args
    return ()


def depth(node: Node) -> int:
    """Nesting depth of a tree, computed without recursion (trees may be hostile)."""
    deepest = 0
    stack = [(node, 1)]
    while stack:
        current, level = stack.pop()
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children(current))
    return deepest


def variables(node: Node) -> frozenset[str]:
    """Names of every attribute the expression reads."""
    found: set[str] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, Var):
            found.add(current.name)
        stack.extend(children(current))
    return frozenset(found)
