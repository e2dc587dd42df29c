"""Fuzzing every parser: random and near-valid input gives a result or the typed error.

RSL (parse, validate, lower), MIL (parse, compile_query, evaluation), maui.cfg,
SWF traces (through a real file, plain and gzipped) and grid.toml.  A crash is any
exception other than the parser's own :class:`~grid_tasks.errors.SourceError`
subclass, or a located error whose line/column is outside the text.
"""

from __future__ import annotations

import gzip
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grid_tasks.errors import ConfigError, GridTasksError
from grid_tasks.maui.cfg import MauiConfigError, parse_maui_config
from grid_tasks.maui.cfgbridge import scheduler_config
from grid_tasks.mil import MILError, compile_query
from grid_tasks.mil import parse as parse_mil
from grid_tasks.mil import unparse as unparse_mil
from grid_tasks.rsl import RSLError, lower, validate
from grid_tasks.rsl import parse as parse_rsl
from grid_tasks.rsl import unparse as unparse_rsl
from grid_tasks.sim.swf import SWFError, SWFReader
from grid_tasks.topology import parse_topology

from .mutate import FUZZ, mutated, noise, only_typed

REPO = Path(__file__).resolve().parent.parent.parent

# --- RSL ---------------------------------------------------------------------------
RSL_SAMPLES = [
    "&(executable=/bin/hostname)(count=4)(maxWallTime=10)",
    '&(executable="/bin/echo")(arguments="hello" world)(environment=(HOME "/home/ann"))'
    "(directory=$(HOME))(stdout=$(HOME)/out)(jobType=mpi)(count=2)",
    "+(&(resourceManagerContact=rmA)(count=4)(label=left)(executable=/bin/app)"
    "(subjobStartType=strict-barrier))"
    "(&(resourceManagerContact=\"rmB\")(count=2)(label=right)(executable=/bin/app)"
    "(subjobCommsType=independent)(maxMemory=512))",
    "&(rslSubstitution=(APP /opt/app))(executable=$(APP)#/bin/run)(count>=1)(queue=batch)",
    "|(&(count=1)(executable=a))(&(count=2)(executable=b))",
]
RSL_CHARS = "&|+()=<>!\"'$#^ executablecountlabelresourceManagerContact/binmaxWallTime0123456789"


def _rsl_pipeline(text: str | bytes) -> None:
    shown = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    spec = only_typed(lambda: parse_rsl(text, cache=False), RSLError, shown)
    if isinstance(spec, RSLError):
        return
    assert parse_rsl(unparse_rsl(spec), cache=False) == spec  # the printer round-trips
    only_typed(lambda: validate(spec), RSLError, shown)
    subjobs = only_typed(lambda: lower(text), RSLError, shown)
    if not isinstance(subjobs, RSLError):
        for sub in subjobs:
            assert sub.to_dict() and parse_rsl(sub.gram_rsl(), cache=False)


@FUZZ
@given(st.one_of(noise(RSL_CHARS), mutated(RSL_SAMPLES, RSL_CHARS)))
def test_rsl_text(text: str) -> None:
    _rsl_pipeline(text)


@FUZZ
@given(st.one_of(st.binary(max_size=120),
                 mutated(RSL_SAMPLES).map(lambda t: t.encode("utf-8", "surrogatepass"))))
def test_rsl_bytes(data: bytes) -> None:
    _rsl_pipeline(data)


# --- MIL ---------------------------------------------------------------------------
MIL_SAMPLES = [
    '$procs >= 4 and match($arch, "x86")',
    "not ($gpus > 0) or $memory_mb / 1024 >= 2.5",
    '($site == "north" xor $os != "linux") and max($procs, 2) mod 3 == 0x1',
    'match($features, "^(ib|gpu)$") and int("12") < float($load) * -~07',
    "true and $x <> 1e3",
]
MIL_CHARS = "$()\"<>=!+-*/~., andorxnotmatchmodmaxinfloatprocsarch0x123456789eE"
ATTRS = [{}, {"procs": 8, "arch": "x86_64", "features": ("ib", "fast"), "memory_mb": 4096,
              "load": 0.5, "site": "north", "os": "linux", "gpus": 0, "x": 1000.0},
         {"procs": "many", "arch": 3, "features": [], "load": float("nan"), "x": None}]


def _mil_pipeline(text: str | bytes) -> None:
    shown = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    tree = only_typed(lambda: parse_mil(text), MILError, shown)
    if isinstance(tree, MILError):
        return
    assert parse_mil(unparse_mil(tree)) == tree  # the printer round-trips
    query = only_typed(lambda: compile_query(text), MILError, shown)
    if not isinstance(query, MILError):
        for attrs in ATTRS:
            assert query(attrs) in (True, False)


@FUZZ
@given(st.one_of(noise(MIL_CHARS), mutated(MIL_SAMPLES, MIL_CHARS)))
def test_mil_text(text: str) -> None:
    _mil_pipeline(text)


@FUZZ
@given(st.binary(max_size=100))
def test_mil_bytes(data: bytes) -> None:
    _mil_pipeline(data)


# --- maui.cfg ----------------------------------------------------------------------
MAUI_SAMPLES = [
    (REPO / "config" / "maui.cfg").read_text(),
    "RMPOLLINTERVAL 00:00:30\nDEFERTIME 5:00\nRESERVATIONDEPTH 4\nBACKFILLPOLICY BESTFIT\n"
    "MODULES logger, jobchecker profiler\nLOGFILEMAXSIZE 1000\n",
    "USERCFG[ann] PRIORITY=10 MAXJOB=4,8 FSTARGET=25+\nQOSCFG[hi] QFLAGS=PREEMPTOR "
    "XFTARGET=1.5\nSRCFG[night] STARTTIME=22:00:00 ENDTIME=06:00:00 HOSTLIST=node1,node2 \\\n"
    "  USERLIST=ann DAYS=MON,TUE PERIOD=DAY\nNODECFG[node1] PROCS=4 FEATURES=fast\n",
    "NODEAVAILABILITYPOLICY DEDICATED:PROCS UTILIZED:MEM\nFSWEIGHT -5\nFSDECAY 0.8 # tail\n",
]
MAUI_CFG_CHARS = "[]=:,#\\\n .+-0123456789USERCFGPRIORITYMAXJOBDEFERTIMEINFINITY"


@FUZZ
@given(st.one_of(noise(MAUI_CFG_CHARS), mutated(MAUI_SAMPLES, MAUI_CFG_CHARS, max_edits=6)))
def test_maui_cfg(text: str) -> None:
    cfg = only_typed(lambda: parse_maui_config(text, "maui.cfg"), MauiConfigError, text)
    if isinstance(cfg, MauiConfigError):
        return
    assert isinstance(cfg.to_dict(), dict)
    assert all(warning.line >= 1 for warning in cfg.warnings)
    try:  # the bridge to the core refuses what it cannot honour, typed
        scheduler_config(cfg)
    except GridTasksError as err:
        assert str(err)


# --- SWF ---------------------------------------------------------------------------
SWF_SAMPLES = [
    "; Version: 2.2\n; Computer: KTH SP2\n; MaxProcs: 100\n; Note: a note\n;  that continues\n"
    "    1        0   100   3600   16  -1  -1   16   7200  -1  1   3   3  -1  1  -1  -1  -1\n"
    "    2       60     5    120    4 1.5  -1    4    600  -1  0   4   4  -1  1  -1   1  10\n",
    "1 0 0 10 1 -1 -1 1 10 -1 1 1 1 -1 1 -1 -1 -1\n\n2 5 0 10.00 2 -1 -1 2 20 -1 1 1 1 -1 1 -1 -1 -1",
]
SWF_CHARS = " ;\n-.0123456789eE+:"


def _read_swf(data: bytes, name: str = "trace.swf") -> int | SWFError:
    with tempfile.TemporaryDirectory(prefix="gt_fuzz_swf") as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        shown = _plain(data)

        def read() -> int:
            with SWFReader(path) as reader:
                return sum(1 for _ in reader)

        return only_typed(read, SWFError, shown)


def _plain(data: bytes) -> str | None:
    """The text the reader sees (decompressed when gzipped; None if it cannot be)."""
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, ValueError, gzip.zlib.error):
            return None
    return data.decode("utf-8", "replace")


SWF_TOKENS = ["0", "1", "-1", "16", "3600", "1.5", "12.00", "-0", "+5", "1e3", "1_000", "0x10",
              "nan", "inf", "-inf", "9" * 30, ".", "-", "1.2.3", "\u0661", "x", ";", ";c"]
swf_lines = st.lists(st.sampled_from(SWF_TOKENS), min_size=15, max_size=20).map(" ".join)
swf_files = st.lists(st.one_of(swf_lines, st.just("; MaxProcs: 8"), st.just("")),
                     max_size=6).map("\n".join)


@FUZZ
@given(st.one_of(noise(SWF_CHARS), mutated(SWF_SAMPLES, SWF_CHARS, max_edits=6), swf_files))
def test_swf_text(text: str) -> None:
    _read_swf(text.encode("utf-8", "surrogatepass"))


@FUZZ
@given(st.one_of(st.binary(max_size=200).filter(lambda b: b[:2] != b"\x1f\x8b"),
                 mutated(SWF_SAMPLES, SWF_CHARS).map(lambda t: gzip.compress(t.encode()))))
def test_swf_bytes_and_valid_gzip(data: bytes) -> None:
    _read_swf(data)


# A corrupt or truncated gzip trace once escaped as EOFError / BadGzipFile / zlib.error.
TRUNCATED = gzip.compress(SWF_SAMPLES[0].encode())[:-12]


@pytest.mark.parametrize("data", [b"\x1f\x8b", b"\x1f\x8b\x00\x00\x00\x00\x00\x00\x00\x00",
                                  TRUNCATED], ids=["magic-only", "bad-method", "truncated"])
def test_swf_corrupt_gzip_minimal(data: bytes) -> None:
    err = _read_swf(data)
    assert isinstance(err, SWFError) and "gzip data at line" in str(err), err


@FUZZ
@given(st.binary(max_size=60).map(lambda b: b"\x1f\x8b" + b))
def test_swf_corrupt_gzip_fuzz(data: bytes) -> None:
    _read_swf(data)


# --- grid.toml ---------------------------------------------------------------------
TOML_SAMPLES = [
    (REPO / "config" / "grid.toml").read_text(),
    (REPO / "config" / "demo-grid.toml").read_text(),
    '[rm.a]\nsite = "x"\n[rm.a.node.n1]\nprocs = 2\nfeatures = ["f"]\n'
    "[rm.b.node.n2]\nprocs = 1\nmemory_mb = 10\nattrs = { k = 1 }\n",
]
TOML_CHARS = '[]."=\n #{},rmnodeprocsmemory_mbfeaturespolicy_file0123456789'


@FUZZ
@given(st.one_of(noise(TOML_CHARS), mutated(TOML_SAMPLES, TOML_CHARS, max_edits=6)))
def test_grid_toml(text: str) -> None:
    with tempfile.TemporaryDirectory(prefix="gt_fuzz_toml") as tmp:
        grid = only_typed(lambda: parse_topology(text, "grid.toml", base_dir=Path(tmp)),
                          ConfigError, text)
    if not isinstance(grid, ConfigError):
        assert all(n.procs >= 1 for n in grid.iter_nodes())
