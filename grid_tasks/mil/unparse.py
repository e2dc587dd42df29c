"""AST back to MIL text, with only the parentheses the grammar needs.

``parse(unparse(tree)) == tree`` for every tree the parser can produce (number
constants non-negative and floats finite, as the parser makes them).
"""

from __future__ import annotations

from .errors import MILError
from .nodes import Binary, Bool, BoolOp, Call, Float, Int, Match, Node, Str, Unary, Var

# Binding strength, loosest first, mirroring mil.lark.
_LOGIC_PREC = {"or": 1, "xor": 2, "and": 3}
_NOT_PREC = 4
_COMPARE_PREC = 5
_ARITH_PREC = {"+": 6, "-": 6, "*": 7, "/": 7, "mod": 7}
_UNARY_PREC = 8
_ATOM_PREC = 9

_QUOTE = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def quote(value: str) -> str:
    """A MIL string constant denoting ``value``."""
    return '"' + "".join(_QUOTE.get(ch, ch) for ch in value) + '"'


def _prec(node: Node) -> int:
    if isinstance(node, BoolOp):
        return _LOGIC_PREC[node.op]
    if isinstance(node, Unary):
        return _NOT_PREC if node.op == "not" else _UNARY_PREC
    if isinstance(node, Binary):
        return _ARITH_PREC.get(node.op, _COMPARE_PREC)
    return _ATOM_PREC


def _wrap(node: Node, min_prec: int) -> str:
    text = unparse(node)
    return f"({text})" if _prec(node) < min_prec else text


def unparse(node: Node) -> str:
    """MIL text for ``node``."""
    if isinstance(node, Bool):
        return "true" if node.value else "false"
    if isinstance(node, Int) and node.value.bit_length() > 10_000:
        return hex(node.value)  # decimal output of huge ints is refused by CPython
    if isinstance(node, (Int, Float)):
        return repr(node.value)
    if isinstance(node, Str):
        return quote(node.value)
    if isinstance(node, Var):
        return "$" + node.name
    if isinstance(node, BoolOp):
        # A nested chain of the same operator needs parentheses to stay a separate node.
        own = _LOGIC_PREC[node.op]
        return f" {node.op} ".join(_wrap(item, own + 1) for item in node.operands)
    if isinstance(node, Unary):
        if node.op == "not":
            return "not " + _wrap(node.operand, _NOT_PREC)
        return node.op + _wrap(node.operand, _UNARY_PREC)
    if isinstance(node, Binary):
        own = _prec(node)
        if own == _COMPARE_PREC:
            return f"{_wrap(node.left, own + 1)} {node.op} {_wrap(node.right, own + 1)}"
        return f"{_wrap(node.left, own)} {node.op} {_wrap(node.right, own + 1)}"
    if isinstance(node, Match):
        return f"match({unparse(node.subject)}, {quote(node.pattern)})"
    if isinstance(node, Call):
        return f"{node.func}({', '.join(unparse(arg) for arg in node.args)})"
    raise MILError(f"not a MIL node: {type(node).__name__}")
