"""maui.cfg: one run reports every error (syntax and values) and Maui's documented ranges."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from grid_tasks.cli import main
from grid_tasks.maui.cfg import MauiConfigError, MauiConfigErrors, parse_maui_config

BROKEN = (
    "RMPOLLINTERVAL 00:00:30\n"                                    # 1 fine
    "FSDECAY 2.0\n"                                                # 2 range
    "BACKFILLPOLICY FIRSFIT\n"                                     # 3 keyword
    "SRCFG[night] STARTTIME=25:00:00 ENDTIME=06:00:00\n"           # 4 time of day
    "USERCFG[ann] MAXJOB=x PRIORITY=y\n"                           # 5 two bad pairs
    '"bad\n'                                                       # 6 syntax
    "RESERVATIONDEPTH 4\n"                                         # 7 fine
)


def errors_of(text: str) -> list[MauiConfigError]:
    with pytest.raises(MauiConfigError) as info:
        parse_maui_config(text, "m.cfg")
    exc = info.value
    return exc.errors if isinstance(exc, MauiConfigErrors) else [exc]


def test_every_error_of_a_file_is_reported_in_file_order() -> None:
    found = [(e.line, e.column, e.key or e.code) for e in errors_of(BROKEN)]
    assert found == [(2, 9, "FSDECAY"), (3, 16, "BACKFILLPOLICY"), (4, 24, "STARTTIME"),
                     (5, 21, "MAXJOB"), (5, 32, "PRIORITY"), (6, 1, "SYNTAX")]


def test_a_syntax_error_costs_only_its_logical_line() -> None:
    text = "FSDEPTH 4 \\\n  = 5\nFSDECAY 3\nUSERCFG[a] PRIORITY=1 \\\n  \"x\nLOGLEVEL 12\n"
    found = [(e.line, e.code) for e in errors_of(text)]
    assert found == [(2, "SYNTAX"), (3, "VALUE"), (5, "SYNTAX"), (6, "VALUE")]


@pytest.mark.parametrize("text, column, words", [
    ("FSDECAY 2.0\n", 9, "at most 1.0"),
    ("FSDECAY 0\n", 9, "at least 0.01"),
    ("FSINTERVAL 0\n", 12, "at least 00:00:01"),
    ("RMPOLLINTERVAL 00:00:00\n", 16, "at least 00:00:01"),
    ("SRCFG[n] STARTTIME=25:00:00\n", 20, "STARTTIME=25:00:00 is past the end of its PERIOD=DAY"),
    ("SRCFG[n] PERIOD=DAY ENDTIME=24:00:01\n", 29, "below 24:00:00"),
    ("SRCFG[n] PERIOD=WEEK STARTTIME=7:00:00:00\n", 32, "PERIOD=WEEK"),
])
def test_documented_ranges_are_refused_where_written(text: str, column: int,
                                                     words: str) -> None:
    [error] = errors_of(text)
    assert (error.line, error.column) == (1, column)
    assert words in error.message


def test_values_inside_the_ranges_are_read() -> None:
    cfg = parse_maui_config("FSDECAY 0.01\nFSINTERVAL 1\nSRCFG[a] ENDTIME=24:00:00\n"
                            "SRCFG[w] PERIOD=WEEK STARTTIME=1:01:00:00\n"
                            "SRCFG[i] PERIOD=INFINITY STARTTIME=30:00:00\n")
    assert cfg.get("FSDECAY") == 0.01 and cfg.get("FSINTERVAL") == 1
    srs = cfg.standing_reservations
    assert srs["a"]["ENDTIME"] == 86400 and srs["w"]["STARTTIME"] == 25 * 3600


def test_cli_prints_every_error_with_its_caret_and_exits_1(tmp_path: Path) -> None:
    cfg = tmp_path / "m.cfg"
    cfg.write_text(BROKEN)
    result = CliRunner().invoke(main, ["maui-config", str(cfg)])
    assert result.exit_code == 1
    for where in ("m.cfg:2:9:", "m.cfg:3:16:", "m.cfg:4:24:", "m.cfg:5:21:", "m.cfg:5:32:",
                  "m.cfg:6:1:"):
        assert where in result.output, result.output
    assert "6 errors in" in result.output


def test_cli_json_lists_every_error(tmp_path: Path) -> None:
    cfg = tmp_path / "m.cfg"
    cfg.write_text(BROKEN)
    result = CliRunner().invoke(main, ["maui-config", str(cfg), "--json"])
    assert result.exit_code == 1
    data = json.loads(result.output)["error"]
    assert [(e["line"], e["column"]) for e in data["errors"]] == \
        [(2, 9), (3, 16), (4, 24), (5, 21), (5, 32), (6, 1)]
