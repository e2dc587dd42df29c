"""Value types of maui.cfg: parsing, formatting and where a bad value goes wrong."""

from __future__ import annotations

import pytest

from grid_tasks.maui.cfg.res_types import Availability, DAY_NAMES, Days, Resources
from grid_tasks.maui.cfg.types import (
    INFINITY,
    Bool,
    Choice,
    FairshareTarget,
    Float,
    FsTarget,
    Int,
    List,
    Str,
    Throttle,
    Time,
    ValueProblem,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("45", 45),
        ("0", 0),
        ("01:30", 90),  # MM:SS
        ("1:00:00", 3600),  # HH:MM:SS
        ("2:03:04:05", 2 * 86400 + 3 * 3600 + 4 * 60 + 5),  # DD:HH:MM:SS
        ("00:00:30", 30),
        ("INFINITY", INFINITY),
        ("infinity", INFINITY),
    ],
)
def test_time_formats(text: str, seconds: int) -> None:
    assert Time().parse(text) == seconds


@pytest.mark.parametrize(
    ("text", "offset"),
    [("1:xx", 2), ("ab", 0), ("1:2:3:4:5", 0), ("-5", 0), ("1::2", 2), ("1:-2", 2)],
)
def test_time_errors_point_at_the_bad_field(text: str, offset: int) -> None:
    with pytest.raises(ValueProblem) as info:
        Time().parse(text)
    assert info.value.offset == offset


def test_time_format_round_trips() -> None:
    t = Time()
    for seconds in (0, 59, 61, 3600, 86399, 86400, 3 * 86400 + 7, INFINITY):
        assert t.parse(t.format(seconds)) == seconds
    assert t.format(90061) == "1:01:01:01"


def test_int_bounds_and_errors() -> None:
    assert Int().parse("-7") == -7
    assert Int(0).parse("0") == 0
    with pytest.raises(ValueProblem, match="at least 0"):
        Int(0).parse("-1")
    with pytest.raises(ValueProblem, match="at most 9"):
        Int(0, 9).parse("10")
    with pytest.raises(ValueProblem, match="integer"):
        Int().parse("1.5")


def test_float() -> None:
    assert Float().parse("0.8") == pytest.approx(0.8)
    assert Float().parse("2") == 2.0
    assert Float().parse(".5") == 0.5
    with pytest.raises(ValueProblem):
        Float().parse("abc")
    with pytest.raises(ValueProblem):
        Float(0.0).parse("-0.1")


@pytest.mark.parametrize("text", ["TRUE", "true", "Yes", "ON", "1"])
def test_bool_true(text: str) -> None:
    assert Bool().parse(text) is True


@pytest.mark.parametrize("text", ["FALSE", "false", "no", "OFF", "0"])
def test_bool_false(text: str) -> None:
    assert Bool().parse(text) is False


def test_bool_rejects_other_words() -> None:
    with pytest.raises(ValueProblem, match="TRUE or FALSE"):
        Bool().parse("maybe")


def test_choice_is_case_insensitive_and_upper_cases() -> None:
    c = Choice("FIRSTFIT", "BESTFIT")
    assert c.parse("bestfit") == "BESTFIT"
    with pytest.raises(ValueProblem, match="FIRSTFIT, BESTFIT"):
        c.parse("worstfit")


def test_list_separators_and_item_validation() -> None:
    assert List().parse("a,b:c d") == ("a", "b", "c", "d")
    assert List(separators=r"[,\s]+").parse("pkg.mod:Cls other") == ("pkg.mod:Cls", "other")
    days = List(Choice("MON", "TUE"))
    assert days.parse("mon,tue") == ("MON", "TUE")
    with pytest.raises(ValueProblem) as info:
        days.parse("mon,xyz")
    assert info.value.offset == 4
    with pytest.raises(ValueProblem):
        List().parse(",,")


@pytest.mark.parametrize(
    ("text", "value"),
    [("4", (4, 4)), ("4,8", (4, 8)), ("-1", (-1, -1)), ("0", (0, 0)), ("2,-1", (2, -1))],
)
def test_throttle_soft_and_hard(text: str, value: tuple[int, int]) -> None:
    assert Throttle().parse(text) == value


@pytest.mark.parametrize(
    ("text", "offset"), [("x", 0), ("4,y", 2), ("8,4", 2), ("1,2,3", 0), ("-2", 0)]
)
def test_throttle_errors(text: str, offset: int) -> None:
    with pytest.raises(ValueProblem) as info:
        Throttle().parse(text)
    assert info.value.offset == offset


@pytest.mark.parametrize(
    ("text", "target"),
    [
        ("25", FairshareTarget(25.0, "TARGET")),
        ("25+", FairshareTarget(25.0, "FLOOR")),
        ("12.5-", FairshareTarget(12.5, "CEILING")),
        ("30^", FairshareTarget(30.0, "CAP")),
    ],
)
def test_fstarget_forms(text: str, target: FairshareTarget) -> None:
    assert FsTarget().parse(text) == target
    assert FsTarget().parse(FsTarget().format(target)) == target
    assert str(target) == text  # str() gives the maui.cfg spelling back


@pytest.mark.parametrize("text", ["", "+", "abc", "-5", "101", "25*"])
def test_fstarget_errors(text: str) -> None:
    with pytest.raises(ValueProblem):
        FsTarget().parse(text)


def test_resources() -> None:
    assert Resources().parse("PROCS:2;MEM:512") == {"PROCS": 2, "MEM": 512}
    assert Resources().parse("procs:-1") == {"PROCS": -1}
    with pytest.raises(ValueProblem) as info:
        Resources().parse("PROCS:2;MEM:lots")
    assert info.value.offset == len("PROCS:2;MEM:")
    with pytest.raises(ValueProblem) as info:
        Resources().parse("PROCS:2;MEM")
    assert info.value.offset == len("PROCS:2;")


def test_availability_policy_per_resource() -> None:
    a = Availability()
    assert a.parse("combined") == {"DEFAULT": "COMBINED"}
    assert a.parse("DEDICATED:PROCS UTILIZED:MEM") == {"PROCS": "DEDICATED", "MEM": "UTILIZED"}
    with pytest.raises(ValueProblem) as info:
        a.parse("DEDICATED:PROCS UTILIZED:GPUS")
    assert info.value.offset == len("DEDICATED:PROCS UTILIZED:")
    with pytest.raises(ValueProblem):
        a.parse("BUSY")


def test_days() -> None:
    assert Days().parse("ALL") == DAY_NAMES
    assert Days().parse("Fri,Mon") == ("MON", "FRI")  # week order
    with pytest.raises(ValueProblem):
        Days().parse("Mon,Someday")


def test_str_needs_text() -> None:
    assert Str().parse("maui.log") == "maui.log"
    with pytest.raises(ValueProblem):
        Str().parse("")
