"""Substitution output is bounded: a doubling chain or many large values are refused early.

Issue 20, finding 5: 550 bytes of ``rsl_substitution`` that double a value made a
268 MB string (1.3 GB RSS, 6 s).  Evaluation now has one output budget (1 MiB by
default, ``max_substitution=``); see :mod:`grid_tasks.rsl.evaluate` for the accounting.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from grid_tasks.cli import main
from grid_tasks.client import Grid
from grid_tasks.rsl import DEFAULT_MAX_SUBSTITUTION, RSLError, evaluate, lower, parse, validate

from grid_tasks.settings import Settings

from .helpers import position_of

MIB = 1 << 20


def doubling(levels: int, use: str = "") -> str:
    """A request whose definitions V0..V<levels-1> each double the one before (V_i: 2**(i+1) bytes)."""
    names = ["A"] + [f"V{i}" for i in range(levels)]
    defs = "(A x)" + "".join(f"({new} $({old})#$({old}))" for old, new in zip(names, names[1:]))
    return f"&(rsl_substitution = {defs})(executable = /bin/echo)(arguments = {use or '$(A)'})"


def refused(text: str, **kwargs: object) -> RSLError:
    with pytest.raises(RSLError) as info:
        lower(text, **kwargs)  # type: ignore[arg-type]
    assert info.value.code == "RSL_EVALUATION_FAILED"
    return info.value


def test_the_reported_doubling_chain_stops_early_at_the_value_that_crosses() -> None:
    text = doubling(28, "$(V27)")  # the finding's request: ~570 bytes for a 268 MB value
    assert len(text) < 600
    start = time.perf_counter()
    err = refused(text)
    assert time.perf_counter() - start < 0.5  # milliseconds, not the 6 s of building it
    # V_i costs 2**(i+1); V0..V18 sum to 2**20 - 2, so V19 is the first that does not fit
    assert (err.line, err.column) == position_of(text, "$(V18)#$(V18)")
    assert f"limit of {MIB} bytes" in err.message
    assert "GRID_TASKS_RSL_MAX_SUBSTITUTION" in err.message


def test_a_smaller_chain_over_the_limit_is_refused_rather_than_built() -> None:
    # 24 levels make a 16 MB argument: accepted before the limit existed.
    err = refused(doubling(24, "$(V23)"))
    assert err.column is not None and err.line == 1


def test_many_moderate_values_add_up_to_the_limit() -> None:
    # V15 is 64 KiB; its definitions cost 2**17 - 2; 14 uses fit what is left, the 15th not.
    uses = " ".join(["$(V15)"] * 20)
    text = doubling(16, uses)
    err = refused(text)
    assert (err.line, err.column) == position_of(text, "$(V15)", 15)
    ok = doubling(16, " ".join(["$(V15)"] * 14))
    assert len(lower(ok)[0].arguments) == 14


def test_the_limit_is_an_argument_and_exact_fit_is_accepted() -> None:
    text = "&(executable = /bin/echo)(arguments = $(HOME)/x)"
    home = {"HOME": "/home/alice"}  # the argument is 13 bytes
    assert lower(text, home, max_substitution=13)[0].arguments == ("/home/alice/x",)
    err = refused(text, variables=home, max_substitution=12)
    assert (err.line, err.column) == position_of(text, "$(HOME)/x")
    assert "limit of 12 bytes" in err.message
    with pytest.raises(RSLError, match="limit of 12 bytes"):
        validate(text, home, max_substitution=12)
    with pytest.raises(RSLError, match="limit of 12 bytes"):
        evaluate(parse(text), home, max_substitution=12)
    assert DEFAULT_MAX_SUBSTITUTION == MIB


def test_sizes_are_utf8_bytes() -> None:
    text = "&(executable = /bin/echo)(arguments = $(E))"
    six = {"E": "é" * 6}  # 12 bytes in UTF-8
    assert lower(text, six, max_substitution=12)[0].arguments == ("é" * 6,)
    refused(text, variables=six, max_substitution=11)


def test_plain_literals_are_free_and_names_built_by_concatenation_are_charged() -> None:
    big = "y" * (2 * MIB)  # bounded by the request's own size, which the caller chose to accept
    assert lower(f'&(executable = /bin/echo)(arguments = "{big}")')[0].arguments == (big,)
    text = "&(rsl_substitution = (N abcdef) ($(N)#$(N) v))(executable = /bin/echo)"
    err = refused(text, max_substitution=11)
    assert (err.line, err.column) == position_of(text, "$(N)#$(N)")


# -- the shell reads GRID_TASKS_RSL_MAX_SUBSTITUTION and passes it --------------------------

SMALL = "&(executable = /bin/echo)(arguments = $(HOME)/a)"  # the argument is 4 bytes with HOME=/h
MULTI = "+(&(resourceManagerContact = rm1)(executable = /bin/echo)(arguments = $(HOME)/a))"


def test_rsl_check_reads_the_setting() -> None:
    def check(limit: str):
        return CliRunner().invoke(main, ["rsl", "check", "--json", "--var", "HOME=/h"],
                                  input=SMALL, env={"GRID_TASKS_RSL_MAX_SUBSTITUTION": limit})

    assert check("4").exit_code == 0
    refused_run = check("3")
    assert refused_run.exit_code == 1
    error = json.loads(refused_run.output)["error"]
    assert error["code"] == "RSL_EVALUATION_FAILED" and "limit of 3 bytes" in error["message"]
    assert (error["line"], error["column"]) == position_of(SMALL, "$(HOME)/a")
    bad = check("lots")
    assert bad.exit_code != 0 and "GRID_TASKS_RSL_MAX_SUBSTITUTION" in bad.output


def test_the_client_passes_the_setting_before_touching_anything(tmp_path: Path) -> None:
    # An unreachable database: reaching it would raise something else than RSLError.
    settings = Settings.from_env({"GRID_TASKS_STATE_DIR": str(tmp_path / "missing" / "state"),
                                  "GRID_TASKS_RSL_MAX_SUBSTITUTION": "3"})
    grid = Grid(settings)
    for submit, text in ((grid.submit, SMALL), (grid.job_request, MULTI),
                         (grid.coallocator.job_request, MULTI)):
        with pytest.raises(RSLError, match="limit of 3 bytes") as info:
            submit(text, variables={"HOME": "/h"})
        assert (info.value.line, info.value.column) == position_of(text, "$(HOME)/a")
    assert not (tmp_path / "missing").exists()
