"""MIL and numbers past CPython's int() digit limit: refused where decimal, exact otherwise."""

from __future__ import annotations

import pytest

from grid_tasks.mil import MILError, compile_query, evaluate, parse, unparse
from grid_tasks.mil.nodes import Int

HUGE_DECIMAL = "7" * 4301  # one past int()'s default 4300-digit limit
HUGE_HEX = "f" * 4000  # about 4816 decimal digits: exact, but str() of it is refused


def test_over_long_decimal_constant_is_a_located_mil_error() -> None:
    text = f"$procs > 1 and $mem > {HUGE_DECIMAL}"
    with pytest.raises(MILError) as info:
        compile_query(text)
    assert (info.value.line, info.value.column) == (1, text.index(HUGE_DECIMAL) + 1)
    assert "too long" in info.value.message


@pytest.mark.parametrize("literal, value", [
    ("0x" + HUGE_HEX, int(HUGE_HEX, 16)),
    ("0" + "7" * 5000, int("7" * 5000, 8)),
], ids=["hex", "octal"])
def test_power_of_two_bases_are_exact_and_print_back(literal: str, value: int) -> None:
    tree = parse(f"$a < {literal}")
    assert tree.right == Int(value)  # type: ignore[attr-defined]
    assert parse(unparse(tree)) == tree  # printed in hex: decimal would hit the limit
    q = compile_query(f"$a < {literal}")
    assert q({"a": value - 1}) and not q({"a": value})


@pytest.mark.parametrize("query, raw", [
    ("$a / 3 > 1", True),
    (f"$a mod 7 == {pow(10, 5000, 7)}", True),  # exact big-integer arithmetic
    ("float($a) > 1", None),  # float() overflows: UNKNOWN
    ("int($s) > 1", None),  # text past the digit limit is not a number: UNKNOWN
    ("$a + 0.5 > 1", None),  # mixing in a float overflows: UNKNOWN
    ("$a == $a", True),
    ("$a < 0x" + HUGE_HEX, False),
])
def test_huge_attribute_values_evaluate_without_escaping(query: str, raw: bool | None) -> None:
    attrs = {"a": 10**5000, "s": "9" * 5000}
    assert evaluate(parse(query), attrs) is raw
    assert compile_query(query)(attrs) is (raw is True)  # UNKNOWN never matches
