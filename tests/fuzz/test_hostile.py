"""Hostile inputs the random fuzz rarely reaches: huge numbers, deep nesting, long lines.

Each parser must answer with a result or its typed, located error.  Every case here
once crashed (int()'s digit limit, tomllib's recursion) or guards against it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from grid_tasks.errors import ConfigError, SourceError
from grid_tasks.maui.cfg import MauiConfigError, parse_maui_config
from grid_tasks.mil import MILError, compile_query
from grid_tasks.rsl import RSLError, lower
from grid_tasks.sim.swf import SWFError, SWFReader
from grid_tasks.topology import parse_topology

from .mutate import only_typed

#: One past CPython's int() digit limit (sys.get_int_max_str_digits() == 4300).
BIG = "1" * 4301
DEEP = 2000


def _swf(line: str) -> Callable[[], Any]:
    def read() -> int:
        with tempfile.TemporaryDirectory(prefix="gt_hostile") as tmp:
            path = Path(tmp) / "t.swf"
            path.write_text(line)
            with SWFReader(path) as reader:
                return sum(1 for _ in reader)
    return read


def _mil(text: str) -> Callable[[], Any]:
    return lambda: compile_query(text)({"a": 1, "b": "x"})


CASES: list[Any] = [
    ("rsl-deep-parens", lambda t: lower(t), RSLError, "&(a=" + "(" * DEEP + "x" + ")" * DEEP + ")"),
    ("rsl-long-argument", lambda t: lower(t), RSLError,
     '&(executable=a)(arguments="' + "x" * 200_000 + '")'),
    ("rsl-many-relations", lambda t: lower(t), RSLError, "&" + "(count=1)" * 5000),
    ("rsl-big-float", lambda t: lower(t), RSLError, f"&(count=1)(executable=a)(maxMemory={BIG}.5)"),
    ("rsl-big-count", lambda t: lower(t), RSLError, f"&(count={BIG})(executable=a)"),
    ("rsl-big-walltime", lambda t: lower(t), RSLError, f"&(count=1)(executable=a)(maxWallTime={BIG})"),
    ("rsl-zero-padded-count", lambda t: lower(t), RSLError, f"&(count={'0' * 5000}1)(executable=a)"),
    ("rsl-doubling-substitution", lambda t: lower(t), RSLError,  # issue 20: 268 MB before
     "&(rsl_substitution = (A x)" + "".join(f"(V{i + 1} $(V{i})#$(V{i}))" for i in range(28))
     .replace("$(V0)", "$(A)") + ")(executable = a)(arguments = $(V28))"),
    ("mil-nested-optional-regex", _mil, MILError, 'match($b, "(?:a?a?)+$")'),
    ("mil-chained-loops-regex", _mil, MILError, 'match($b, "a*a*a*a*a*a*a*a*a*a*b")'),
    ("mil-deep-parens", _mil, MILError, "(" * DEEP + "true" + ")" * DEEP),
    ("mil-deep-not", _mil, MILError, "not " * DEEP + "true"),
    ("mil-long-chain", _mil, MILError, "$a > 0" + " and $a > 0" * 3000),
    ("mil-big-int", _mil, MILError, f"$a > {BIG}"),
    ("mil-big-hex", _mil, MILError, f"$a > 0x{BIG}"),
    ("mil-big-int-call", _mil, MILError, f'int("{BIG}") > 1'),
    ("maui-long-continuation", parse_maui_config, MauiConfigError, "RMPOLLINTERVAL \\\n" * 3000 + "30\n"),
    ("maui-long-name", parse_maui_config, MauiConfigError, "USERCFG[" + "a" * 100_000 + "] PRIORITY=1\n"),
    ("maui-big-float", parse_maui_config, MauiConfigError, f"FSDECAY 1e{BIG}\n"),
    ("maui-big-int", parse_maui_config, MauiConfigError, f"DEFERCOUNT {BIG}\n"),
    ("maui-big-key", parse_maui_config, MauiConfigError, f"USERCFG[a] PRIORITY={BIG}\n"),
    ("maui-big-time", parse_maui_config, MauiConfigError, f"DEFERTIME {BIG}:00\n"),
    ("maui-big-negative", parse_maui_config, MauiConfigError, f"USERCFG[a] PRIORITY=-{BIG}\n"),
    ("maui-zero-padded-time", parse_maui_config, MauiConfigError, f"DEFERTIME 1:{'0' * 5000}1\n"),
    ("maui-big-limit", parse_maui_config, MauiConfigError, f"USERCFG[a] MAXJOB=1,{BIG}\n"),
    ("maui-big-resource", parse_maui_config, MauiConfigError,
     f"SRCFG[a] RESOURCES=PROCS:{BIG}\n"),
    ("swf-big-field", _swf, SWFError, f"1 0 0 10 {BIG} -1 -1 1 10 -1 1 1 1 -1 1 -1 -1 -1\n"),
    ("swf-long-line", _swf, SWFError, "1 " * 100_000 + "\n"),
    ("toml-nan-procs", parse_topology, ConfigError, "[rm.a.node.n]\nprocs = nan\n"),
    ("toml-inf-procs", parse_topology, ConfigError, "[rm.a.node.n]\nprocs = inf\n"),
    ("toml-deep-array", parse_topology, ConfigError, "a = " + "[" * DEEP + "]" * DEEP + "\n"),
    ("toml-deep-inline-table", parse_topology, ConfigError,
     "a = " + "{b=" * DEEP + "1" + "}" * DEEP + "\n"),
    ("toml-deep-array-in-node", parse_topology, ConfigError,
     "[rm.a.node.n]\nprocs = 1\nx = [\n" + "[" * DEEP + "]" * DEEP + "]\n"),
    ("toml-big-int", parse_topology, ConfigError, f"[rm.a.node.n]\nprocs = {BIG}\n"),
    ("toml-big-int-underscores", parse_topology, ConfigError,
     "[rm.a.node.n]\nprocs = 1\nx = " + "1_" * DEEP * 3 + "1\n"),
    ("toml-big-attribute", parse_topology, ConfigError, "[rm.a.node.n]\nprocs = 1\nx = 9" + "0" * 19 + "\n"),
    ("swf-big-header", _swf, SWFError, f"; MaxProcs: {BIG}\n1 0 0 10 1 -1 -1 1 10 -1 1 1 1 -1 1 -1 -1 -1\n"),
]


#: Cases with no sensible result: they must be refused, not merely survived.
MUST_REFUSE = {"rsl-doubling-substitution", "mil-nested-optional-regex", "mil-chained-loops-regex",
               "rsl-big-count", "rsl-big-walltime", "maui-big-int", "maui-big-key",
               "maui-big-time", "maui-big-negative", "maui-big-limit",
               "maui-big-resource", "toml-deep-array", "toml-deep-inline-table",
               "toml-deep-array-in-node", "toml-big-int", "toml-big-int-underscores",
               "toml-big-attribute"}


def _case_id(case: Any) -> str:
    return case.values[0] if hasattr(case, "values") else case[0]


@pytest.mark.parametrize(("name", "parse", "error", "text"), CASES, ids=[_case_id(c) for c in CASES])
def test_hostile_input(name: str, parse: Callable[[str], Any], error: type[SourceError],
                       text: str) -> None:
    if name.startswith(("swf", "mil")):
        outcome = only_typed(parse(text), error, text)
    else:
        outcome = only_typed(lambda: parse(text), error, text)
    if name in MUST_REFUSE:
        assert isinstance(outcome, error), f"{name}: accepted instead of refused"
        assert outcome.line is not None, f"{name}: refused without a line: {outcome!r}"
