"""Substitution: ordered, scoped definitions, caller variables, defaults, errors."""

from __future__ import annotations

import pytest

from grid_tasks.rsl import Boolean, Literal, Relation, RSLError, Sequence, evaluate, parse, unparse

from .helpers import position_of


def values_of(spec, attribute: str) -> tuple:
    found = [op for op in spec.operands if isinstance(op, Relation) and op.attribute == attribute]
    assert len(found) == 1
    return found[0].values


def test_caller_variables_and_concatenation() -> None:
    out = evaluate(parse("&(directory = $(HOME)/run)(stdout = $(HOME) # '/' # $(LOGNAME).out)"), {"HOME": "/h/al", "LOGNAME": "al"})
    assert values_of(out, "directory") == (Literal("/h/al/run"),)
    assert values_of(out, "stdout") == (Literal("/h/al/al.out"),)


def test_definitions_are_ordered_and_build_on_each_other() -> None:
    text = "&(rsl_substitution = (BASE $(HOME)/x) (BIN $(BASE)/bin))(executable = $(BIN)/app)"
    out = evaluate(parse(text), {"HOME": "/h"})
    assert values_of(out, "executable") == (Literal("/h/x/bin/app"),)
    # the substitution relation itself is kept, evaluated
    assert values_of(out, "rsl_substitution") == (
        Sequence((Literal("BASE"), Literal("/h/x"))),
        Sequence((Literal("BIN"), Literal("/h/x/bin"))),
    )


def test_a_relation_sees_only_earlier_definitions() -> None:
    text = "&(executable = $(APP))(rsl_substitution = (APP a))"
    with pytest.raises(RSLError) as info:
        evaluate(parse(text))
    assert info.value.code == "RSL_EVALUATION_FAILED"
    assert (info.value.line, info.value.column) == position_of(text, "$(APP)")
    assert info.value.key == "APP"


def test_definitions_are_scoped_to_their_conjunction() -> None:
    text = "+(rsl_substitution = (SHARED s))(&(rsl_substitution = (MINE m))(a = $(SHARED)$(MINE)))(&(b = $(MINE)))"
    with pytest.raises(RSLError) as info:
        evaluate(parse(text))
    assert (info.value.line, info.value.column) == position_of(text, "$(MINE)", 2)
    ok = evaluate(parse(text.replace("(b = $(MINE))", "(b = $(SHARED))")))
    assert isinstance(ok, Boolean)
    assert unparse(ok) == "+(rsl_substitution = (SHARED s))(&(rsl_substitution = (MINE m))(a = sm))(&(b = s))"


def test_inner_definition_shadows_caller_variable() -> None:
    out = evaluate(parse("&(rsl_substitution = (HOME /other))(directory = $(HOME))"), {"HOME": "/h"})
    assert values_of(out, "directory") == (Literal("/other"),)


def test_a_default_value_is_refused_as_gram_refuses_it_even_when_defined() -> None:
    text = "&(a = x)(b = $(X fallback))"
    for variables in (None, {"X": "x"}):
        with pytest.raises(RSLError) as info:
            evaluate(parse(text), variables)
        assert info.value.code == "RSL_EVALUATION_FAILED"
        assert (info.value.line, info.value.column) == position_of(text, "$(X")
        assert "default value" in info.value.message and "rsl_substitution" in info.value.message


def test_names_are_case_sensitive() -> None:
    with pytest.raises(RSLError) as info:
        evaluate(parse("a = $(home)"), {"HOME": "/h"})
    assert info.value.code == "RSL_EVALUATION_FAILED"


def test_sequences_are_evaluated_inside() -> None:
    out = evaluate(parse("environment = (PATH $(HOME)/bin) (N 1)"), {"HOME": "/h"})
    assert out.values == (Sequence((Literal("PATH"), Literal("/h/bin"))), Sequence((Literal("N"), Literal("1"))))


@pytest.mark.parametrize(
    ("text", "culprit"),
    [
        ("&(rsl_substitution = A b)", "A"),
        ("&(rsl_substitution = (A))", "(A"),
        ("&(rsl_substitution = (A b c))", "(A"),
        ("&(rsl_substitution = (A (b c)))", "(b"),
        ("&(rsl_substitution = ($(U) b))", "$(U)"),
    ],
)
def test_malformed_substitution(text: str, culprit: str) -> None:
    with pytest.raises(RSLError) as info:
        evaluate(parse(text))
    assert info.value.code == "RSL_EVALUATION_FAILED"
    assert (info.value.line, info.value.column) == position_of(text, culprit)


def test_substitution_attribute_name_is_canonicalised() -> None:
    out = evaluate(parse("&(RSL_Substitution = (A a))(RslSubstitution = (B $(A)b))(x = $(B))"))
    assert values_of(out, "x") == (Literal("ab"),)
