"""What MIL queries mean: three-valued logic, types, C arithmetic, match, conversions.

Every case is checked three ways: the compiled predicate (dict fast path and the exact
path taken for other mappings), the compiled value function and the interpreter.
"""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import Any, Mapping

import pytest

from grid_tasks.mil import CompiledQuery, MILError, compile_query, evaluate

NODE = {"procs": 8, "memory": 4096, "arch": "x86_64", "os": "linux", "load": 0.5,
        "features": ("ib", "gpu"), "up": True, "zero": 0, "text_num": " 42 ",
        "text_float": "2.5e1", "nan": math.nan, "big": 10**400, "inf": math.inf}


def value(text: str, attrs: Mapping[str, Any] = NODE) -> Any:
    """The raw three-valued value, checked to agree across all implementations."""
    q = compile_query(text)
    raw = evaluate(text, attrs)
    compiled = q.evaluate(attrs)
    assert compiled == raw and type(compiled) is type(raw)
    expected = raw is True
    assert q(dict(attrs)) is expected
    assert q(MappingProxyType(dict(attrs))) is expected
    return raw


@pytest.mark.parametrize("text, expected", [
    ("$procs >= 4", True), ("$procs > 8", False), ("4 <= $procs", True),
    ("$procs == 8.0", True), ("$load < 1", True), ("$arch == \"x86_64\"", True),
    ('$arch < "y"', True), ("$up == true", True), ("$up != false", True), ("$up == false", False), ("$up", True),
    ("not $up", False), ("$memory / 1024 == 4", True), ("$procs <> 8", False),
    ("$inf > $big", True), ("$big > 1e300", True),
])
def test_comparisons(text: str, expected: bool) -> None:
    assert value(text) is expected


@pytest.mark.parametrize("text", [
    "$missing > 1", "not ($missing > 1)", "$missing == $missing", "$missing != 1",
    '$arch > 3', '$arch == 3', 'not ($arch == 3)', '$arch != 3', "$procs == true",
    "$up + 1 > 0", "$procs and true", "not $procs", "$nan > 0", "not ($nan > 0)",
    "$nan != 1", "$nan == $nan", "$features == \"ib\"",
    "$procs / $zero > 0", "$procs mod $zero == 0", "$inf - $inf > 0", "$inf * $zero == 0",
    "float($big) > 0", "int($inf) > 0", "int($arch) > 0", "-$arch < 0", "~$load == 0",
    "max($arch, 1) > 0", "match($procs, \"8\")", "match($up, \"t\")",
])
def test_missing_and_mismatched_are_unknown(text: str) -> None:
    assert value(text) is None


def test_unknown_attribute_types_are_unknown() -> None:
    from decimal import Decimal

    odd = {"d": Decimal(5), "n": None, "s": b"bytes", "sub": type("S", (str,), {})("x")}
    for text in ("$d > 1", "$d == 5", "not ($d < 1)", "$n == 1", '$s == "bytes"',
                 'match($s, "b")', '$sub == "x"', '$sub != "y"'):
        assert value(text, odd) is None, text


KLEENE = [
    ("true and $missing", None), ("false and $missing", False), ("$missing and false", False),
    ("true or $missing", True), ("$missing or true", True), ("false or $missing", None),
    ("not (false and $missing)", True), ("true xor $missing", None),
    ("true xor false", True), ("true xor true xor true", True), ("false xor false", False),
    ("not (not $missing)", None),
]


@pytest.mark.parametrize("text, expected", KLEENE)
def test_three_valued_logic(text: str, expected: bool | None) -> None:
    assert value(text) is expected


@pytest.mark.parametrize("text, expected", [
    ("7 / 2", 3), ("-7 / 2", -3), ("7 / -2", -3), ("7 mod 3", 1), ("-7 mod 3", -1),
    ("7 mod -3", 1), ("7.0 / 2", 3.5), ("7.5 mod 2", 1.5), ("-7.5 mod 2", -1.5),
    ("1 + 2 * 3 - 4", 3), ("~5", -6), ("-(2 + 3)", -5), ("017 + 0x10", 31),
    ("max(2, 3.0)", 3.0), ("max(3, 2.0)", 3.0), ("min(2, 3)", 2), ('max("a", "b")', "b"),
    ("int(3.9)", 3), ("int(-3.9)", -3), ("int($text_num)", 42), ("int(true)", 1),
    ("float(2)", 2.0), ("float($text_float)", 25.0), ('int("4x")', None),
    ('float("nan")', None), ('int("")', None), ("$procs * 2", 16), ("$arch", "x86_64"),
])
def test_arithmetic_and_functions(text: str, expected: Any) -> None:
    q = compile_query(f"({text}) == ({text})") if expected is not None else None
    got = evaluate(text, NODE)
    assert got == expected and type(got) is type(expected)
    if q is not None:
        assert q(NODE) is True  # a value equals itself
    assert compile_query(f"({text}) == ({text}) or true").evaluate(NODE) is True


@pytest.mark.parametrize("text, expected", [
    ('match($arch, "x86")', True), ('match($arch, "^86")', False),
    ('match($arch, "^x86_(32|64)$")', True), ('match($features, "^gpu$")', True),
    ('match($features, "^fpga$")', False), ('not match($features, "^fpga$")', True),
    ('match("literal", "lit")', True), ('match($missing, "x")', None),
])
def test_match(text: str, expected: bool | None) -> None:
    assert value(text) is expected


def test_match_on_mixed_sequences() -> None:
    attrs = {"f": ["ib", 3], "l": [], "s": frozenset({"a", "b"})}
    assert value('match($f, "ib")', attrs) is True
    assert value('match($f, "gpu")', attrs) is None  # 3 is not a string: cannot say no
    assert value('match($l, "x")', attrs) is False
    assert value('match($s, "^b$")', attrs) is True


@pytest.mark.parametrize("text, line, column, fragment", [
    ('"x86" + 1', 1, 1, "'+' needs numbers"),
    ("$a and 4", 1, 8, "'and' needs true/false"),
    ("not 3", 1, 5, "'not' needs a true/false"),
    ("true < false", 1, 1, "cannot order"),
    ('1 == "1"', 1, 3, "compares an integer with a string"),
    ("~1.5 > 0", 1, 2, "'~' needs an integer"),
    ("$a / 0 > 1", 1, 6, "by zero"),
    ('max(1, "a") > 0', 1, 1, "mixes a number and a string"),
    ("match(1, \"a\")", 1, 7, "searches a string"),
    ("$procs + 1", 1, 8, "true/false expression"),
    ('"just a string"', 1, 1, "true/false expression"),
    ("\n  $x or -true", 2, 10, "unary '-' needs a number"),
])
def test_static_type_errors_are_located(text: str, line: int, column: int,
                                        fragment: str) -> None:
    with pytest.raises(MILError) as info:
        compile_query(text)
    assert fragment in info.value.message, info.value.message
    assert (info.value.line, info.value.column) == (line, column), info.value


def test_compiled_query_object() -> None:
    q = compile_query('$procs >= 4 and match($arch, "x86")')
    assert isinstance(q, CompiledQuery)
    assert q.variables == {"procs", "arch"}
    assert q.text == '$procs >= 4 and match($arch, "x86")'
    assert "def mil_query" in q.python_source
    assert q(NODE) is True and q({"procs": 2, "arch": "x86"}) is False
    assert q({}) is False and q.evaluate({}) is None
    assert compile_query(q.tree)(NODE) is True  # trees compile too


def test_defaultdict_is_not_mistaken_for_a_present_attribute() -> None:
    from collections import defaultdict

    attrs = defaultdict(int, {"procs": 8})
    q = compile_query("$gpus == 0")
    assert q(attrs) is False  # missing, although a defaultdict would invent a 0
    assert "gpus" not in attrs


def test_query_text_cannot_inject_code() -> None:
    q = compile_query('$a == "\\"); import os; (\\"" or match($a, "__import__")')
    assert q({"a": '"); import os; ("'}) is True
    assert "import os" not in q.python_source.replace("'\"); import os; (\"'", "")


def test_negative_constants_compare_like_any_other() -> None:
    q = compile_query("$t > -5 and -2.5 >= $t")
    assert "_c" not in q.python_source.split("def mil_value")[0]  # inline, no helper calls
    assert value("$t > -5 and -2.5 >= $t", {"t": -3}) is True
    assert value("$t > -5 and -2.5 >= $t", {"t": -1}) is False
    assert value("$t > -5", {"t": "x"}) is None


def test_attributes_must_be_a_mapping() -> None:
    q = compile_query("$a > 1")
    for bad in (None, 3, ["a"]):
        with pytest.raises(MILError, match="must be a mapping"):
            q(bad)  # type: ignore[arg-type]
        with pytest.raises(MILError, match="must be a mapping"):
            q.evaluate(bad)  # type: ignore[arg-type]
        with pytest.raises(MILError, match="must be a mapping"):
            evaluate("$a > 1", bad)  # type: ignore[arg-type]
