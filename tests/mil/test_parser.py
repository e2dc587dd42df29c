"""MIL parsing: constants, precedence, positions and located errors."""

from __future__ import annotations

import pytest

from grid_tasks.errors import SourceError
from grid_tasks.mil import MAX_DEPTH, MILError, parse, unparse
from grid_tasks.mil.nodes import Binary, Bool, BoolOp, Call, Float, Int, Match, Str, Unary, Var


@pytest.mark.parametrize("text, value", [
    ("42", Int(42)), ("0", Int(0)), ("017", Int(15)), ("00", Int(0)), ("0x1F", Int(31)),
    ("0X1f", Int(31)), ("1.5", Float(1.5)), (".5", Float(0.5)), ("2.", Float(2.0)),
    ("1e3", Float(1000.0)), ("2.5E-2", Float(0.025)), ("09.5", Float(9.5)),
    ('"abc"', Str("abc")), ('""', Str("")), (r'"a\"b"', Str('a"b')),
    (r'"a\\b"', Str("a\\b")), (r'"tab\there"', Str("tab\there")),
    (r'"\d+"', Str("\\d+")), ('"ünï"', Str("ünï")),
    ("true", Bool(True)), ("TRUE", Bool(True)), ("True", Bool(True)),
    ("false", Bool(False)), ("FALSE", Bool(False)), ("False", Bool(False)),
    ("$system_arch", Var("system_arch")), ("$X9", Var("X9")),
])
def test_constants_and_variables(text: str, value: object) -> None:
    assert parse(text) == value


@pytest.mark.parametrize("text, expected", [
    # or < xor < and < not < comparison < + - < * / mod < unary
    ("$a or $b xor $c and $d",
     BoolOp("or", (Var("a"), BoolOp("xor", (Var("b"), BoolOp("and", (Var("c"), Var("d")))))))),
    ("not $a and $b", BoolOp("and", (Unary("not", Var("a")), Var("b")))),
    ("not $a == 1", Unary("not", Binary("==", Var("a"), Int(1)))),
    ("1 + 2 * 3 < 4", Binary("<", Binary("+", Int(1), Binary("*", Int(2), Int(3))), Int(4))),
    ("1 - 2 - 3", Binary("-", Binary("-", Int(1), Int(2)), Int(3))),
    ("8 / 2 mod 3", Binary("mod", Binary("/", Int(8), Int(2)), Int(3))),
    ("-2 * 3", Binary("*", Unary("-", Int(2)), Int(3))),
    ("~-1", Unary("~", Unary("-", Int(1)))),
    ("1 - -1", Binary("-", Int(1), Unary("-", Int(1)))),
    ("(1 + 2) * 3", Binary("*", Binary("+", Int(1), Int(2)), Int(3))),
    ("$a <> 1", Binary("!=", Var("a"), Int(1))),
    ("$a or ($b or $c)", BoolOp("or", (Var("a"), BoolOp("or", (Var("b"), Var("c")))))),
    ("$a and $b and $c", BoolOp("and", (Var("a"), Var("b"), Var("c")))),
    ("max(1, min($a, 2.0))", Call("max", (Int(1), Call("min", (Var("a"), Float(2.0)))))),
    ("int($a) + float(1)", Binary("+", Call("int", (Var("a"),)), Call("float", (Int(1),)))),
    ('match($arch, "x86.*")', Match(Var("arch"), "x86.*")),
    ("(1 < 2) == true", Binary("==", Binary("<", Int(1), Int(2)), Bool(True))),
])
def test_precedence(text: str, expected: object) -> None:
    tree = parse(text)
    assert tree == expected
    assert parse(unparse(tree)) == tree


def test_positions_are_kept() -> None:
    tree = parse('$procs >= 4 and\n  match($arch, "x86")')
    assert isinstance(tree, BoolOp)
    comparison, match = tree.operands
    assert (comparison.line, comparison.column) == (1, 8)  # the operator
    assert (comparison.left.line, comparison.left.column) == (1, 1)
    assert (match.line, match.column) == (2, 3)


def test_bytes_are_read_as_utf8() -> None:
    assert parse('$os == "linux"'.encode()) == parse('$os == "linux"')


def _error(text: object) -> MILError:
    with pytest.raises(MILError) as info:
        parse(text)  # type: ignore[arg-type]
    assert isinstance(info.value, SourceError)
    return info.value


@pytest.mark.parametrize("text, line, column, fragment", [
    ("", 1, 1, "empty query"),
    ("   \n ", 1, 1, "empty query"),
    ("1 < 2 < 3", 1, 7, "unexpected '<'"),
    ("$a and", 1, 7, "end of query"),
    ("$a and\n  (1 +", 2, 7, "end of query"),
    ("notx", 1, 1, "unknown word 'notx'"),
    ("$a ornot $b", 1, 4, "unknown word 'ornot'"),
    ("procs > 1", 1, 1, "attributes are written $name"),
    ('$a == "abc', 1, 7, "unterminated string"),
    ('"line\nbreak"', 1, 1, "unterminated string"),
    ("08", 1, 1, "invalid octal"),
    ("1e999 > 1", 1, 1, "out of range"),
    ("$ > 1", 1, 1, "'$' must be followed"),
    ("1 @ 2", 1, 3, "unexpected character '@'"),
    ('match($a, $b)', 1, 11, "a string constant"),
    ('match($a, "(")', 1, 12, "invalid regular expression"),  # at the pattern's culprit
    ('match($a, "(a+)+$")', 1, 12, "exponential"),
    ('match($a, "^(a|a)*$")', 1, 13, "exponential"),
    ('match($a, "(.|x)*y")', 1, 12, "exponential"),
    ("max(1)", 1, 6, "unexpected ')'"),
    ("(1", 1, 3, "')'"),
])
def test_syntax_errors_are_located(text: str, line: int, column: int, fragment: str) -> None:
    err = _error(text)
    assert (err.line, err.column) == (line, column), err
    assert fragment in err.message
    if text.strip():
        assert "^" in err.pretty()


def test_invalid_utf8_and_wrong_types() -> None:
    err = _error(b"$a == \xff")
    assert "UTF-8" in err.message and err.column == 7
    assert "str or bytes" in _error(42).message


def test_depth_limit_but_long_flat_chains_are_fine() -> None:
    nested = "not " * (MAX_DEPTH + 1) + "true"
    assert "nested" in _error(nested).message
    chain = " or ".join(f'$name == "n{i}"' for i in range(2000))
    tree = parse(chain)
    assert isinstance(tree, BoolOp) and len(tree.operands) == 2000
    deep_parens = "(" * 5000 + "1" + ")" * 5000 + " > 0"
    assert parse(deep_parens) == Binary(">", Int(1), Int(0))


def test_huge_number_constant_is_refused() -> None:
    assert "too long" in _error("1" * 5000).message


@pytest.mark.parametrize("pattern", ["^node[0-9]+$", "x86|amd64", "^(ib|gpu)$", "(ab|cd)*",
                                     "(?:foo|bar)+baz", "\\.edu$", "[a-z]{2,8}"])
def test_ordinary_patterns_are_accepted(pattern: str) -> None:
    tree = parse(f'match($name, "{pattern}")')
    assert isinstance(tree, Match) and tree.pattern == pattern  # "\." keeps its backslash
