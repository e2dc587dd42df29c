"""Hypothesis strategies for MIL trees and attribute maps (shared by the property tests)."""

from __future__ import annotations

import math

from hypothesis import strategies as st

from grid_tasks.mil.nodes import Binary, Bool, BoolOp, Call, Float, Int, Match, Str, Unary, Var

NAMES = ("a", "b", "procs", "arch", "f")
PATTERNS = ("a", "^x", "b$", "[0-9]+", "", "x|y", "^(ib|gpu)$", "\\d")

names = st.sampled_from(NAMES)
var_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
ints = st.one_of(st.integers(0, 20), st.integers(0, 10**30))
floats = st.floats(min_value=0, max_value=1e300, allow_nan=False).map(abs)


def _num_leaf() -> st.SearchStrategy:
    return st.one_of(ints.map(Int), floats.map(Float), names.map(Var))


def _str_leaf() -> st.SearchStrategy:
    return st.one_of(st.text(max_size=6).map(Str), names.map(Var))


def _num_step(inner: st.SearchStrategy) -> st.SearchStrategy:
    arith = st.sampled_from(["+", "-", "*", "/", "mod"])
    return st.one_of(
        st.builds(Binary, arith, inner, inner),
        st.builds(Unary, st.just("-"), inner),
        st.builds(Unary, st.just("~"), st.one_of(ints.map(Int), names.map(Var))),
        st.builds(lambda f, x, y: Call(f, (x, y)), st.sampled_from(["max", "min"]), inner, inner),
        st.builds(lambda f, x: Call(f, (x,)), st.sampled_from(["int", "float"]), inner),
    )


num_exprs = st.recursive(_num_leaf(), _num_step, max_leaves=6)
str_exprs = st.one_of(
    _str_leaf(),
    st.builds(lambda f, x, y: Call(f, (x, y)), st.sampled_from(["max", "min"]), _str_leaf(),
              _str_leaf()))
compare_ops = st.sampled_from(["==", "!=", "<", ">", "<=", ">="])


def _bool_leaf() -> st.SearchStrategy:
    return st.one_of(
        st.booleans().map(Bool), names.map(Var),
        st.builds(Binary, compare_ops, num_exprs, num_exprs),
        st.builds(Binary, compare_ops, str_exprs, str_exprs),
        st.builds(Binary, st.sampled_from(["==", "!="]), names.map(Var),
                  st.booleans().map(Bool)),
        st.builds(Match, st.one_of(names.map(Var), str_exprs), st.sampled_from(PATTERNS)),
    )


def _bool_step(inner: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(
        st.builds(lambda op, items: BoolOp(op, tuple(items)),
                  st.sampled_from(["and", "or", "xor"]), st.lists(inner, min_size=2, max_size=3)),
        st.builds(Unary, st.just("not"), inner),
    )


bool_exprs = st.recursive(_bool_leaf(), _bool_step, max_leaves=8)
any_exprs = st.one_of(bool_exprs, num_exprs, str_exprs)

values = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 20), st.integers(-10**20, 10**20),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0, 0.0, -0.0, 1, 2.5]),
    st.text(max_size=4), st.sampled_from(["x86", "ib", "gpu", "12", " 3 ", "2.5", "b"]),
    st.lists(st.sampled_from(["ib", "gpu", "a", "x"]), max_size=3),
    st.tuples(st.sampled_from(["ib", "x"]), st.integers(0, 3)),
)
attr_maps = st.dictionaries(names, values, max_size=len(NAMES))


def same(x: object, y: object) -> bool:
    """Equal values of the same type (NaN never appears in MIL results)."""
    if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
        return True
    return type(x) is type(y) and x == y
