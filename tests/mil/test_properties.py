"""Property tests: round trips, hostile text, and compiled code against the interpreter."""

from __future__ import annotations

import time
from types import MappingProxyType

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from grid_tasks.mil import MILError, compile_query, evaluate, parse, unparse
from grid_tasks.mil.parser import MAX_LENGTH

from .strategies import any_exprs, attr_maps, bool_exprs, same

FAST = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

TOKENS = ["$a", "$procs", "1", "017", "0x1f", "2.5", '"x"', '"a\\"b"', "true", "FALSE", "and",
          "or", "xor", "not", "==", "!=", "<>", "<", ">=", "+", "-", "*", "/", "mod", "~",
          "(", ")", ",", "match", "max", "min", "int", "float", "$", '"', "08", "1e999", "@"]


@FAST
@given(any_exprs)
def test_unparse_round_trips(tree) -> None:
    text = unparse(tree)
    assert parse(text) == tree, text


@FAST
@given(st.text(max_size=60))
def test_random_text_parses_or_raises_milerror(text: str) -> None:
    try:
        parse(text)
    except MILError as exc:
        assert exc.line is not None and exc.column is not None


@FAST
@given(st.binary(max_size=60))
def test_random_bytes_parse_or_raise_milerror(data: bytes) -> None:
    try:
        parse(data)
    except MILError:
        pass


@FAST
@given(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=14), attr_maps)
def test_token_soup_never_escapes_as_another_exception(tokens, attrs) -> None:
    text = " ".join(tokens)
    try:
        q = compile_query(text)
    except MILError:
        return
    assert q(attrs) in (True, False)
    q.evaluate(attrs)
    evaluate(text, attrs)


def _compiled(tree):
    try:
        return compile_query(tree)
    except MILError as exc:  # statically ill-typed by construction, e.g. '~' of a float
        assume(False)
        raise AssertionError from exc


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bool_exprs, attr_maps)
def test_compiled_equals_interpreter(tree, attrs) -> None:
    q = _compiled(tree)
    expected = evaluate(tree, attrs)
    assert same(q.evaluate(attrs), expected), (unparse(tree), attrs)
    assert q(attrs) is (expected is True), (unparse(tree), attrs, expected)
    assert q(MappingProxyType(attrs)) is (expected is True)


@FAST
@given(bool_exprs, attr_maps)
def test_negation_never_makes_unknown_true(tree, attrs) -> None:
    q, nq = _compiled(tree), _compiled(parse("not (" + unparse(tree) + ")"))
    assert not (q(attrs) and nq(attrs))
    if evaluate(tree, attrs) is None:
        assert not q(attrs) and not nq(attrs)


def _elapsed(fn, *args) -> float:
    start = time.process_time()
    try:
        fn(*args)
    except MILError:
        pass
    return time.process_time() - start


def test_hostile_inputs_fail_fast() -> None:
    hostile = ["(" * 20_000, '"' + "a" * 100_000, "not " * 20_000 + "true",
               "-" * 20_000 + "1", "1 + " * 20_000 + "1", "$a == " * 20_000,
               "match(" * 20_000, "\x00" * 100_000, "é" * 100_000, "1" * 100_000,
               "0x" + "f" * 100_000 + " > 1"]
    for text in hostile:
        assert _elapsed(compile_query, text) < 5, text[:20]


def test_overlong_text_is_refused_at_once() -> None:
    text = "$a > 1 or " * (MAX_LENGTH // 10) + "true"
    assert _elapsed(compile_query, text) < 0.5
    try:
        parse(text)
    except MILError as exc:
        assert "longer than" in exc.message
    else:
        raise AssertionError("over-long query accepted")


def test_time_is_linear_in_query_length() -> None:
    def chain(n: int) -> str:
        return " or ".join(f'$name == "n{i}" and $procs > {i}' for i in range(n))

    small = min(_elapsed(compile_query, chain(250)) for _ in range(2))
    large = min(_elapsed(compile_query, chain(2000)) for _ in range(2))
    assert large < 30 * max(small, 1e-3)  # 8x the text; quadratic would be 64x
    q = compile_query(chain(2000))
    assert q({"name": "n1999", "procs": 2000}) and not q({"name": "n1999", "procs": 3})


def test_deepest_allowed_queries_compile() -> None:
    from grid_tasks.mil import MAX_DEPTH

    d = MAX_DEPTH - 3  # leaves a comparison and its operands room below
    shapes = [
        "-(" * d + "$a" + ")" * d + " > 0",
        "max($a, " * d + "1" + ")" * d + " > 0",
        "".join(f"($v{i} > 1 {'and' if i % 2 else 'or'} " for i in range(d)) + "true" + ")" * d,
        "".join(f"($v{i} xor " for i in range(d)) + "$a + 1 > 2" + ")" * d,
        "".join(f"not ($v{i} and " for i in range(d // 2)) + "true" + ")" * (d // 2),
    ]
    for text in shapes:
        q = compile_query(text)
        assert q({"a": 1}) is (evaluate(text, {"a": 1}) is True)


REGEX_PIECES = ["a", "b", "a?", "a*", "a+", "(", ")", "|", ".", "[ab]", "{2,}", "(?:", "\\w",
                "$", "^", "{1,3}"]


@FAST
@given(st.lists(st.sampled_from(REGEX_PIECES), min_size=1, max_size=10))
def test_accepted_patterns_do_not_backtrack_exponentially(pieces) -> None:
    from grid_tasks.mil.regex import compile_pattern

    regex = compile_pattern("".join(pieces)).regex
    if regex is None:
        return
    start = time.process_time()
    regex.search("a" * 26 + "!")
    regex.search("ab" * 13 + "!")
    assert time.process_time() - start < 0.5, "".join(pieces)
