"""Value semantics of MIL, as the compiled queries use them.

Every helper takes already-evaluated operands and returns a value or ``None``
(UNKNOWN).  None of them raises: a type mismatch, a division by zero, an overflow
or a NaN all yield ``None``.  :mod:`interp` restates the same rules independently;
the property tests hold the two to each other.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable

SEQUENCES = (tuple, list, set, frozenset)
_INT_TEXT = re.compile(r"[ \t]*[+-]?[0-9]+[ \t]*")
_FLOAT_TEXT = re.compile(
    r"[ \t]*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[ \t]*")


def val(v: Any) -> Any:
    """An attribute value as MIL sees it: supported kinds pass, anything else is UNKNOWN."""
    t = type(v)
    if t is bool or t is int or t is str:
        return v
    if t is float:
        return v if v == v else None
    if t in SEQUENCES:
        return v
    return None


def _num(x: Any) -> bool:
    t = type(x)
    return t is int or t is float


def _nan_to_none(r: Any) -> Any:
    return None if r != r else r


def neg(x: Any) -> Any:
    return -x if _num(x) else None


def inv(x: Any) -> Any:
    return ~x if type(x) is int else None


def not_(x: Any) -> Any:
    return (not x) if type(x) is bool else None


def _arith(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def op(x: Any, y: Any) -> Any:
        if not (_num(x) and _num(y)):
            return None
        try:
            return _nan_to_none(fn(x, y))
        except (OverflowError, ValueError, ZeroDivisionError):
            return None
    return op


def _c_div(x: Any, y: Any) -> Any:
    if y == 0:
        return None
    if type(x) is int and type(y) is int:
        q = abs(x) // abs(y)  # C truncates toward zero
        return q if (x < 0) == (y < 0) else -q
    return x / y


def _c_mod(x: Any, y: Any) -> Any:
    if y == 0:
        return None
    if type(x) is int and type(y) is int:
        r = abs(x) % abs(y)  # C: the remainder takes the dividend's sign
        return -r if x < 0 else r
    return math.fmod(x, y)


add = _arith(lambda x, y: x + y)
sub = _arith(lambda x, y: x - y)
mul = _arith(lambda x, y: x * y)
div = _arith(_c_div)
mod = _arith(_c_mod)


def _family(x: Any) -> str | None:
    t = type(x)
    if t is int or t is float:
        return "num"
    if t is str:
        return "str"
    if t is bool:
        return "bool"
    return None


def _compare(fn: Callable[[Any, Any], bool], ordering: bool) -> Callable[[Any, Any], Any]:
    def op(x: Any, y: Any) -> Any:
        family = _family(x)
        if family is None or family != _family(y) or (ordering and family == "bool"):
            return None
        return fn(x, y)
    return op


eq = _compare(lambda x, y: x == y, False)
ne = _compare(lambda x, y: x != y, False)
lt = _compare(lambda x, y: x < y, True)
gt = _compare(lambda x, y: x > y, True)
le = _compare(lambda x, y: x <= y, True)
ge = _compare(lambda x, y: x >= y, True)
COMPARE = {"==": eq, "!=": ne, "<": lt, ">": gt, "<=": le, ">=": ge}
ARITH = {"+": add, "-": sub, "*": mul, "/": div, "mod": mod}


def and_(*items: Any) -> Any:
    if any(x is False for x in items):
        return False
    return True if all(x is True for x in items) else None


def or_(*items: Any) -> Any:
    if any(x is True for x in items):
        return True
    return False if all(x is False for x in items) else None


def xor(*items: Any) -> Any:
    if not all(type(x) is bool for x in items):
        return None
    return sum(items) % 2 == 1


def match(search: Callable[[str], Any], x: Any) -> Any:
    """``search`` is a compiled pattern's ``search``; sequences match if any item does."""
    if type(x) is str:
        return search(x) is not None
    if type(x) not in SEQUENCES:
        return None
    if any(type(item) is str and search(item) is not None for item in x):
        return True
    return False if all(type(item) is str for item in x) else None


def _extreme(pick: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def op(x: Any, y: Any) -> Any:
        if _num(x) and _num(y):
            best = pick(x, y)
            if type(x) is float or type(y) is float:
                try:
                    return float(best)  # C promotes to double when either side is one
                except OverflowError:
                    return None
            return best
        if type(x) is str and type(y) is str:
            return pick(x, y)
        return None
    return op


max_ = _extreme(max)
min_ = _extreme(min)


def to_int(x: Any) -> Any:
    t = type(x)
    try:
        if t is int or t is bool or t is float:
            return int(x)
        if t is str and _INT_TEXT.fullmatch(x):
            return int(x)
    except (OverflowError, ValueError):
        pass
    return None


def to_float(x: Any) -> Any:
    t = type(x)
    try:
        if t is int or t is bool or t is float:
            return float(x)
        if t is str and _FLOAT_TEXT.fullmatch(x):
            return float(x)
    except (OverflowError, ValueError):
        pass
    return None


CALLS = {"max": max_, "min": min_, "int": to_int, "float": to_float}
