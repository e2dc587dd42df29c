"""Parsing: every construct of RSL v1.0, positions, and typed syntax errors."""

from __future__ import annotations

import pytest

from grid_tasks.rsl import (
    Boolean,
    BoolOp,
    Concat,
    GramError,
    Literal,
    RelOp,
    Relation,
    RSLError,
    Sequence,
    Variable,
    canonical_attribute,
    parse,
)
from grid_tasks.rsl.lexer import MAX_DEPTH
from grid_tasks.rsl.parser import parse_with_lark

from .helpers import position_of


def rel(text: str) -> Relation:
    spec = parse(text)
    assert isinstance(spec, Relation)
    return spec


@pytest.mark.parametrize("op", list(RelOp))
def test_every_relation_operator(op: RelOp) -> None:
    spec = rel(f"count {op.value} 4")
    assert spec.op is op and spec.values == (Literal("4"),)


@pytest.mark.parametrize("op", list(BoolOp))
def test_every_boolean_operator(op: BoolOp) -> None:
    spec = parse(f"{op.value}(a=1)(b=2)")
    assert spec == Boolean(op, (Relation("a", RelOp.EQ, (Literal("1"),)), Relation("b", RelOp.EQ, (Literal("2"),))))


def test_nested_booleans_and_multirequest() -> None:
    spec = parse("+(&(executable=a)(|(count=1)(count=2)))(&(executable=b))")
    assert isinstance(spec, Boolean) and spec.op is BoolOp.MULTI
    first = spec.operands[0]
    assert isinstance(first, Boolean) and first.op is BoolOp.AND
    assert isinstance(first.operands[1], Boolean) and first.operands[1].op is BoolOp.OR


def test_value_sequences_nest() -> None:
    spec = rel("environment = (A 1) (B (x y) z)")
    assert spec.values == (
        Sequence((Literal("A"), Literal("1"))),
        Sequence((Literal("B"), Sequence((Literal("x"), Literal("y"))), Literal("z"))),
    )


def test_unquoted_literals_keep_inner_specials() -> None:
    # '+', '&' and '|' may appear inside an unquoted literal, just not first
    assert rel("arguments = a+b c&d /usr/bin/x-y.z").values == (
        Literal("a+b"),
        Literal("c&d"),
        Literal("/usr/bin/x-y.z"),
    )


@pytest.mark.parametrize(
    ("source", "value"),
    [
        ('"a b"', "a b"),
        ('"say ""hi"""', 'say "hi"'),
        ("'it''s'", "it's"),
        ("'has \"double\" inside'", 'has "double" inside'),
        ('""', ""),
        ("^!a!!b \"q\" 'r'!", 'a!b "q" \'r\''),
        ("^|x(y)z|", "x(y)z"),
        ('"multi\nline"', "multi\nline"),
        ('"(* not a comment *)"', "(* not a comment *)"),
    ],
)
def test_quoted_strings(source: str, value: str) -> None:
    assert rel(f"a = {source}").values == (Literal(value),)


def test_quoted_attribute_name() -> None:
    assert rel('"executable" = x').attribute == "executable"


def test_variables_with_and_without_default() -> None:
    assert rel("a = $(HOME)").values == (Variable("HOME"),)
    assert rel('a = $(SCRATCH "/tmp")').values == (Variable("SCRATCH", Literal("/tmp")),)
    assert rel("a = $(A $(B))").values == (Variable("A", Variable("B")),)


def test_explicit_concatenation_is_flat() -> None:
    assert rel('a = x # $(Y) # "z"').values == (Concat((Literal("x"), Variable("Y"), Literal("z"))),)


@pytest.mark.parametrize(
    ("source", "parts"),
    [
        ("$(HOME)/bin", (Variable("HOME"), Literal("/bin"))),
        ("/opt/$(V)", (Literal("/opt/"), Variable("V"))),
        ("$(A)$(B)", (Variable("A"), Variable("B"))),
        ("x$(A)y$(B)", (Literal("x"), Variable("A"), Literal("y"), Variable("B"))),
    ],
)
def test_implicit_concatenation(source: str, parts: tuple) -> None:
    assert rel(f"a = {source}").values == (Concat(parts),)


def test_no_implicit_concatenation_across_space_or_quotes() -> None:
    assert rel("a = $(A) b").values == (Variable("A"), Literal("b"))
    assert rel('a = $(A)"b"').values == (Variable("A"), Literal("b"))
    assert rel('a = "b"$(A)').values == (Literal("b"), Variable("A"))


def test_comments_anywhere() -> None:
    text = "(* job *) &(* first *)(executable = /bin/ls (* inline *))\n(* multi\nline *)(count = $( (* in var *) N))"
    spec = parse(text)
    assert spec == parse("&(executable=/bin/ls)(count=$(N))")


def test_attribute_names_compare_case_and_underscore_insensitively() -> None:
    keys = {canonical_attribute(n) for n in ("maxWallTime", "max_wall_time", "MAX_WALL_TIME", "MaxWall_Time")}
    assert keys == {"maxwalltime"}
    assert rel("maxWallTime = 5").key == rel("max_wall_time = 5").key


def test_positions_are_kept() -> None:
    text = "&(executable = /bin/ls)\n  (arguments = -l\n      $(HOME)/x)"
    spec = parse(text)
    assert isinstance(spec, Boolean)
    args = spec.operands[1]
    assert isinstance(args, Relation)
    assert (args.line, args.column) == position_of(text, "arguments")
    concat = args.values[1]
    assert (concat.line, concat.column) == position_of(text, "$(HOME)")
    assert (args.values[0].line, args.values[0].column) == position_of(text, "-l")


def test_positions_do_not_affect_equality() -> None:
    assert parse("&(a=b)") == parse("&\n\n   (a   =\n b)")


def test_bytes_input() -> None:
    assert parse("&(a=é)".encode()) == parse("&(a=é)")


def test_crlf_is_whitespace() -> None:
    assert parse("&(a = b)\r\n(c = d)\r\n") == parse("&(a=b)(c=d)")


def test_fast_driver_agrees_with_lark() -> None:
    text = "+(&(a=x#$(B c)#'d' (e (f $(G)h)))(rsl_substitution=(G 1)))(|(x>=1)(y!=2)(z<3)(w<=4)(v>5))"
    assert parse(text) == parse_with_lark(text)


def expect_error(text: str, code: GramError, culprit: str | None, occurrence: int = 1) -> RSLError:
    with pytest.raises(RSLError) as info:
        parse(text)
    err = info.value
    assert err.code == code.value
    if culprit is not None:
        assert (err.line, err.column) == position_of(text, culprit, occurrence)
    return err


@pytest.mark.parametrize(
    ("text", "culprit", "occurrence"),
    [
        ('&(a = "unterminated)', '"', 1),
        ("&(a = 'x''y)", "'", 1),
        ("&(a = ^!never closed)", "^", 1),
        ("&(a = b) (* open comment", "(*", 1),
        ("&(a = b ? c)", "?", 1),
        ("&(a = b ~)", "~", 1),
        ("&(a = b))", ")", 2),
        ("&(a b)", "b", 1),
        ("&(= b)", "=", 1),
        ("&(a = b)\n(c = d) e", "e", 1),
        ("a = $(X", None, 1),
        ("a = $((x) y)", "$", 1),
        ("a = $(X y z)", "z", 1),
        ("a = $(X (y))", "(y", 1),
        ("&(a = ())", ")", 1),
        ("a = b !", "!", 1),
        ("a = ^", "^", 1),
    ],
)
def test_syntax_errors_are_bad_rsl_with_position(text: str, culprit: str | None, occurrence: int) -> None:
    err = expect_error(text, GramError.BAD_RSL, culprit, occurrence)
    assert err.text == text and "^" in err.pretty()


def test_unexpected_end_points_past_the_text() -> None:
    text = "&(a = b)\n(c ="
    err = expect_error(text, GramError.BAD_RSL, None)
    assert (err.line, err.column) == (2, len("(c =") + 1)
    assert "end of input" in err.message


@pytest.mark.parametrize("text", ["", "   \n\t ", "\r\n"])
def test_empty_is_zero_length_rsl(text: str) -> None:
    err = expect_error(text, GramError.ZERO_LENGTH_RSL, None)
    assert (err.line, err.column) == (1, 1)


def test_comment_only_is_a_syntax_error() -> None:
    err = expect_error("(* nothing *)", GramError.BAD_RSL, None)
    assert "end of input" in err.message


def test_nesting_limit_is_a_typed_error() -> None:
    text = "a = " + "(" * (MAX_DEPTH + 1) + "x" + ")" * (MAX_DEPTH + 1)
    err = expect_error(text, GramError.BAD_RSL, "(", MAX_DEPTH + 1)
    assert "nested deeper" in err.message
    ok = "a = " + "(" * MAX_DEPTH + "x" + ")" * MAX_DEPTH
    assert isinstance(parse(ok), Relation)


def test_invalid_utf8_bytes() -> None:
    data = "&(a = b)\n(c = é".encode() + b"\xff)"
    with pytest.raises(RSLError) as info:
        parse(data)
    assert info.value.code == "BAD_RSL" and "UTF-8" in info.value.message
    assert (info.value.line, info.value.column) == (2, len("(c = é") + 1)


def test_the_rsl_package_stays_pure() -> None:
    import subprocess
    import sys

    code = (
        "import sys, grid_tasks.rsl, grid_tasks.rsl.validate, grid_tasks.rsl.lower;"
        "print(sorted(m for m in ('celery', 'redis', 'sqlalchemy', 'kombu') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_source_name_is_reported() -> None:
    with pytest.raises(RSLError) as info:
        parse("&(a", source="job.rsl")
    assert str(info.value).startswith("job.rsl:1:")


def test_parse_cache_shares_immutable_trees() -> None:
    text = "&(executable = /bin/cached)(count = 3)"
    assert parse(text) is parse(text)
    fresh = parse(text, cache=False)
    assert fresh == parse(text) and fresh is not parse(text)
