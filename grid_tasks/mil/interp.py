"""A plain tree-walking interpreter: the reference semantics of MIL.

Deliberately written apart from :mod:`runtime` and :mod:`compiler` (which are built
for speed) so that the property tests can hold the compiled code to it.  Results are
``True``/``False``, a number or string, or ``None`` for UNKNOWN.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

from .errors import MILError
from .nodes import Binary, Bool, BoolOp, Call, Float, Int, Match, Node, Str, Unary, Var
from .regex import compile_pattern

_SEQ_TYPES = (tuple, list, set, frozenset)


def _kind(value: Any) -> str | None:
    """'bool', 'num', 'str', 'seq' or None (unknown / unsupported)."""
    if value is True or value is False:
        return "bool"
    if type(value) in (int, float):
        return None if isinstance(value, float) and math.isnan(value) else "num"
    if type(value) is str:
        return "str"
    if type(value) in _SEQ_TYPES:
        return "seq"
    return None


def _arith(op: str, x: Any, y: Any) -> Any:
    if _kind(x) != "num" or _kind(y) != "num":
        return None
    both_int = isinstance(x, int) and isinstance(y, int)
    try:
        if op == "+":
            result = x + y
        elif op == "-":
            result = x - y
        elif op == "*":
            result = x * y
        elif y == 0:
            return None
        elif op == "/":
            result = _int_div(x, y) if both_int else x / y
        else:
            result = x - y * _int_div(x, y) if both_int else math.fmod(x, y)
    except (OverflowError, ValueError):
        return None
    return None if isinstance(result, float) and math.isnan(result) else result


def _int_div(x: int, y: int) -> int:
    quotient = abs(x) // abs(y)
    return quotient if (x >= 0) == (y >= 0) else -quotient


def _compare(op: str, x: Any, y: Any) -> Any:
    kx, ky = _kind(x), _kind(y)
    if kx is None or kx != ky or kx == "seq":
        return None
    if kx == "bool" and op not in ("==", "!="):
        return None
    return {"==": x == y, "!=": x != y, "<": x < y, ">": x > y,
            "<=": x <= y, ">=": x >= y}[op]


def _logic(op: str, values: list[Any]) -> Any:
    truths = [v if _kind(v) == "bool" else None for v in values]
    if op == "and":
        return False if False in truths else (None if None in truths else True)
    if op == "or":
        return True if True in truths else (None if None in truths else False)
    if None in truths:
        return None
    return truths.count(True) % 2 == 1


def _unary(op: str, x: Any) -> Any:
    kind = _kind(x)
    if op == "not":
        return (not x) if kind == "bool" else None
    if op == "-":
        return -x if kind == "num" else None
    return ~x if kind == "num" and isinstance(x, int) else None


def _match(pattern: str, subject: Any) -> Any:
    regex = compile_pattern(pattern)[0]
    kind = _kind(subject)
    if regex is None or kind not in ("str", "seq"):
        return None
    items = [subject] if kind == "str" else list(subject)
    if any(_kind(item) == "str" and regex.search(item) for item in items):
        return True
    return False if all(_kind(item) == "str" for item in items) else None


def _convert(func: str, x: Any) -> Any:
    kind = _kind(x)
    try:
        if kind in ("num", "bool"):
            return int(x) if func == "int" else float(x)
        if kind == "str":
            return _from_text(func, x)
    except (OverflowError, ValueError):
        return None
    return None


def _from_text(func: str, text: str) -> Any:
    body = text.strip(" \t")
    if func == "int":
        return int(body) if re.fullmatch(r"[+-]?[0-9]+", body) else None
    number = r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?"
    return float(body) if re.fullmatch(number, body) else None


def _extreme(func: str, x: Any, y: Any) -> Any:
    kx, ky = _kind(x), _kind(y)
    if kx != ky or kx not in ("num", "str"):
        return None
    chosen = max(x, y) if func == "max" else min(x, y)
    if kx == "num" and (isinstance(x, float) or isinstance(y, float)):
        try:
            return float(chosen)
        except OverflowError:
            return None
    return chosen


def evaluate(tree: Node, attrs: Mapping[str, object]) -> Any:
    """Evaluate ``tree`` against ``attrs``; UNKNOWN is ``None``."""
    if isinstance(tree, (Bool, Int, Float, Str)):
        return tree.value
    if isinstance(tree, Var):
        value = attrs.get(tree.name)
        return value if _kind(value) is not None else None
    if isinstance(tree, BoolOp):
        return _logic(tree.op, [evaluate(item, attrs) for item in tree.operands])
    if isinstance(tree, Unary):
        return _unary(tree.op, evaluate(tree.operand, attrs))
    if isinstance(tree, Binary):
        left, right = evaluate(tree.left, attrs), evaluate(tree.right, attrs)
        if tree.op in ("+", "-", "*", "/", "mod"):
            return _arith(tree.op, left, right)
        return _compare(tree.op, left, right)
    if isinstance(tree, Match):
        return _match(tree.pattern, evaluate(tree.subject, attrs))
    if isinstance(tree, Call):
        args = [evaluate(arg, attrs) for arg in tree.args]
        if tree.func in ("int", "float"):
            return _convert(tree.func, args[0])
        return _extreme(tree.func, args[0], args[1])
    raise MILError(f"not a MIL node: {type(tree).__name__}")
