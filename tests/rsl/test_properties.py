"""Property tests: generated trees round-trip; arbitrary input only ever raises RSLError."""

from __future__ import annotations

import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grid_tasks.rsl import (
    Boolean,
    BoolOp,
    Concat,
    Literal,
    RelOp,
    Relation,
    RSLError,
    Sequence,
    Variable,
    lower,
    parse,
    unparse,
)
from grid_tasks.rsl.parser import parse_with_lark

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

texts = st.text(max_size=12)
literals = st.builds(Literal, texts)
variables = st.builds(Variable, texts, st.one_of(st.none(), literals, st.builds(Variable, texts)))
atoms = st.one_of(literals, variables)
concats = st.builds(lambda parts: Concat(tuple(parts)), st.lists(atoms, min_size=2, max_size=4))
simple_values = st.one_of(literals, variables, concats)
values = st.recursive(
    simple_values,
    lambda inner: st.builds(lambda items: Sequence(tuple(items)), st.lists(inner, min_size=1, max_size=4)),
    max_leaves=12,
)
relations = st.builds(
    lambda name, op, vals: Relation(name, op, tuple(vals)),
    texts,
    st.sampled_from(list(RelOp)),
    st.lists(values, min_size=1, max_size=4),
)
specs = st.recursive(
    relations,
    lambda inner: st.builds(
        lambda op, ops: Boolean(op, tuple(ops)), st.sampled_from(list(BoolOp)), st.lists(inner, min_size=1, max_size=4)
    ),
    max_leaves=10,
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs)
def test_generated_trees_round_trip(spec) -> None:
    text = unparse(spec)
    assert parse(text) == spec
    assert unparse(parse(text)) == text


# Fragments that reach deep into the grammar, so random soups are not all lexical errors.
_PIECES = ["&", "|", "+", "(", ")", "=", "!=", "<", "<=", ">", ">=", "#", "$", "$(", "a", "b1", "/x/y",
           '"q"', "'s'", '"', "'", "^!", "!", " ", "\n", "(*", "*)", "executable", "count", "2", "?", "~"]


@FAST
@given(st.lists(st.sampled_from(_PIECES), max_size=30).map("".join))
def test_token_soup_parses_or_raises_rslerror(text: str) -> None:
    try:
        fast = parse(text)
    except RSLError as err:
        assert err.code in ("BAD_RSL", "ZERO_LENGTH_RSL") and err.line is not None and err.column is not None
        return
    assert fast == parse_with_lark(text)  # the fast loop and lark's own agree
    try:
        lower(text)
    except RSLError as err:
        assert err.code and err.line is not None


@FAST
@given(st.text(max_size=60))
def test_random_text_only_raises_rslerror(text: str) -> None:
    try:
        parse(text)
    except RSLError as err:
        assert err.code in ("BAD_RSL", "ZERO_LENGTH_RSL")


@FAST
@given(st.binary(max_size=60))
def test_random_bytes_only_raise_rslerror(data: bytes) -> None:
    try:
        lower(data)
    except RSLError as err:
        assert err.code is not None


def _timed(text: str) -> float:
    # CPU time of this process, not wall time: a loaded machine must not fail the test,
    # while quadratic parsing of these 50k-character inputs would still take far longer
    start = time.process_time()
    try:
        parse(text)
    except RSLError:
        pass
    return time.process_time() - start


def test_hostile_inputs_are_fast_and_typed() -> None:
    hostile = [
        "(" * 50_000,
        "a = " + "$(" * 20_000,
        "a = " + "x#" * 20_000 + "x",
        "&" + "(a=b)" * 20_000,
        '"' + "x" * 100_000,
        "(*" * 30_000,
        "a = " + "^" * 50_000,
    ]
    for text in hostile:
        assert _timed(text) < 3.0
    assert isinstance(parse("a = " + "x#" * 20_000 + "x").values[0], Concat)
