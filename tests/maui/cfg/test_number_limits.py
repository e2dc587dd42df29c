"""maui.cfg numbers past Maui's C long, past float range, and past int()'s digit limit."""

from __future__ import annotations

import pytest

from grid_tasks.maui.cfg import MauiConfigError, parse_maui_config
from grid_tasks.maui.cfg.res_types import Resources
from grid_tasks.maui.cfg.types import LONG_MAX, Int, Throttle, Time, ValueProblem

#: One past CPython's default int() digit limit (4300).
HUGE = "3" * 4301


def _position(text: str, culprit: str) -> tuple[int, int]:
    offset = text.index(culprit)
    return text.count("\n", 0, offset) + 1, offset - (text.rfind("\n", 0, offset) + 1) + 1


@pytest.mark.parametrize(
    ("text", "culprit", "key"),
    [
        (f"DEFERCOUNT {HUGE}\n", HUGE, "DEFERCOUNT"),
        (f"RMPOLLINTERVAL 30\nDEFERCOUNT {LONG_MAX + 1}\n", str(LONG_MAX + 1), "DEFERCOUNT"),
        (f"USERCFG[a] PRIORITY={HUGE}\n", HUGE, "PRIORITY"),
        (f"USERCFG[a] PRIORITY=-{HUGE}\n", "-" + HUGE, "PRIORITY"),
        (f"DEFERTIME {HUGE}:00\n", HUGE, "DEFERTIME"),
        (f"DEFERTIME 00:00:{HUGE}\n", HUGE, "DEFERTIME"),
        (f"DEFERTIME {HUGE}\n", HUGE, "DEFERTIME"),
        (f"USERCFG[a] MAXJOB=2,{HUGE}\n", HUGE, "MAXJOB"),
        (f"SRCFG[r] RESOURCES=PROCS:2;MEM:{HUGE}\n", HUGE, "RESOURCES"),
        (f"USERCFG[a] FSTARGET=1e{HUGE}\n", "1e", "FSTARGET"),
        ("FSDECAY 1e999\n", "1e999", "FSDECAY"),
    ],
    ids=["int", "long-max-plus-one", "object-key", "negative", "time-field", "time-seconds-field",
         "time-seconds", "throttle-hard", "resources", "fstarget-inf", "float-inf"],
)
def test_out_of_range_number_is_a_located_config_error(text: str, culprit: str, key: str) -> None:
    with pytest.raises(MauiConfigError) as info:
        parse_maui_config(text, "maui.cfg")
    err = info.value
    assert err.key == key and err.code == "VALUE"
    assert (err.line, err.column) == _position(text, culprit)
    assert "out of range" in err.message
    assert len(err.message) < 200  # a 4301-digit value is summarised, not echoed
    assert err.pretty().splitlines()[-1].endswith("^")


def test_the_limits_themselves_are_accepted() -> None:
    cfg = parse_maui_config(f"DEFERCOUNT {LONG_MAX}\nUSERCFG[a] PRIORITY=-{LONG_MAX}\n"
                            f"DEFERTIME 00:{'0' * 5000}7\n")
    assert cfg.get("DEFERCOUNT") == LONG_MAX
    assert cfg.get("DEFERTIME") == 7
    assert cfg.objects["USERCFG"]["a"]["PRIORITY"] == -LONG_MAX


@pytest.mark.parametrize(("vtype", "text", "offset"), [
    (Int(), "0" * 6000 + "5", None),
    (Int(), "-" + HUGE, 0),
    (Throttle(), f"1,{HUGE}", 2),
    (Resources(), f"PROCS:{HUGE}", 6),
    (Time(), f"1:{HUGE}", 2),
])
def test_value_types_report_the_offset_of_the_huge_part(vtype: object, text: str,
                                                        offset: int | None) -> None:
    if offset is None:
        assert vtype.parse(text) == 5  # type: ignore[attr-defined]
        return
    with pytest.raises(ValueProblem) as info:
        vtype.parse(text)  # type: ignore[attr-defined]
    assert info.value.offset == offset
    assert "4301-digit" in info.value.message
