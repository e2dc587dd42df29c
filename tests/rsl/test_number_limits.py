"""Numeric attributes past GRAM's C int (and past CPython's int() digit limit)."""

from __future__ import annotations

import pytest

from grid_tasks.rsl import RSLError, lower, validate
from grid_tasks.rsl.attributes import INT_MAX, RESTART, RULES, IntRule

from .helpers import position_of

#: One past CPython's default int() digit limit (4300).
HUGE = "7" * 4301
INT_RULES = sorted(name for name, rule in RULES.items() if isinstance(rule, IntRule))


def _request(rule: IntRule, value: str) -> str:
    if rule.when == RESTART:  # stdout_position...: only a restart request takes them
        return f"&(restart = gram://rmA/jobs/1)\n({rule.name} = {value})"
    extra = "" if rule.name == "count" else "(count = 1)"
    return f"&(executable = /bin/app){extra}\n({rule.name} = {value})"


@pytest.mark.parametrize("key", INT_RULES)
@pytest.mark.parametrize("value", [HUGE, str(INT_MAX + 1), "0" * 5000 + str(INT_MAX + 1)],
                         ids=["4301-digits", "int-max-plus-one", "zero-padded"])
def test_too_large_earns_the_attributes_value_error(key: str, value: str) -> None:
    rule = RULES[key]
    assert isinstance(rule, IntRule)
    text = _request(rule, value)
    with pytest.raises(RSLError) as info:
        validate(text)
    err = info.value
    assert err.code == rule.value_error.value
    assert err.key == rule.name
    assert (err.line, err.column) == position_of(text, value)
    assert f"at most {INT_MAX}" in err.message


def test_huge_number_is_summarised_not_echoed() -> None:
    with pytest.raises(RSLError) as info:
        lower(f"&(executable = a)(count = {HUGE})")
    assert "4301-digit number" in str(info.value)
    assert len(str(info.value)) < 200
    assert info.value.code == "INVALID_COUNT"


@pytest.mark.parametrize("value", [str(INT_MAX), "0" * 5000 + "12"])
def test_largest_and_zero_padded_values_are_accepted(value: str) -> None:
    (sub,) = lower(f"&(executable = a)(count = {value})(maxWallTime = {value})")
    assert sub.count == int(value.lstrip("0"))
    assert sub.max_wall_time_s == int(value.lstrip("0")) * 60


def test_every_subjob_of_a_multirequest_is_checked() -> None:
    text = f"+(&(executable = a)(count = 2))\n (&(executable = b)(maxTime = {HUGE}))"
    with pytest.raises(RSLError) as info:
        lower(text)
    assert info.value.code == "INVALID_MAXTIME"
    assert (info.value.line, info.value.column) == position_of(text, HUGE)
