"""Property tests: any text reads or fails with MauiConfigError; generated configs
read back to exactly what was generated."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grid_tasks.maui.cfg import PARAMETERS, MauiConfig, MauiConfigError, parse_maui_config
from grid_tasks.maui.cfg.params import NODECFG_KEYS, OBJECT_PARAMETERS, SRCFG_KEYS
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
    ValueType,
)

FAST = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

# --- random text never escapes as anything but MauiConfigError ------------------------

_MAUI_ALPHABET = st.sampled_from(list("ABRMPOLLINTERVAL[]=#\\\"\n\t :,;+-^.01239 xyz\r"))


def _read_or_config_error(text: str) -> None:
    try:
        cfg = parse_maui_config(text)
    except MauiConfigError as exc:
        assert exc.line is None or exc.line >= 1
        exc.pretty()  # the caret display never fails either
        return
    assert isinstance(cfg, MauiConfig)
    cfg.to_dict()


@FAST
@given(st.text(max_size=200))
def test_any_text_reads_or_raises_maui_config_error(text: str) -> None:
    _read_or_config_error(text)


@FAST
@given(st.text(_MAUI_ALPHABET, max_size=120))
def test_maui_looking_text_reads_or_raises_maui_config_error(text: str) -> None:
    _read_or_config_error(text)


_NAMES = st.sampled_from(sorted(PARAMETERS) + sorted(OBJECT_PARAMETERS) + ["SRHOSTLIST[0]"])
_WORDS = st.text(st.sampled_from(list("abc019:,;-+=.^[]INFTY")), min_size=1, max_size=12)


@FAST
@given(st.lists(st.tuples(_NAMES, st.lists(_WORDS, max_size=4)), max_size=6))
def test_known_names_with_random_values(lines: list[tuple[str, list[str]]]) -> None:
    _read_or_config_error("".join(f"{name} {' '.join(words)}\n" for name, words in lines))


# --- generated valid configurations read back exactly ---------------------------------

_NAME_CHARS = st.sampled_from(list("abcdefghijklmnopqrstuvwxyzABCXYZ0123456789_.-"))
_NAME = st.text(_NAME_CHARS, min_size=1, max_size=8).filter(lambda s: s[0].isalnum())
_WORD = st.text(st.sampled_from(list("abcxyz0189_./-")), min_size=1, max_size=10).filter(
    lambda s: s[0] not in "-")


def value_strategy(vtype: ValueType) -> st.SearchStrategy[Any]:
    """Python values of a schema type (what reading their text must give back)."""
    if isinstance(vtype, Int):
        return st.integers(vtype.minimum if vtype.minimum is not None else -10**9,
                           vtype.maximum if vtype.maximum is not None else 10**9)
    if isinstance(vtype, Float):
        top = vtype.maximum if vtype.maximum is not None else 1e9
        return st.floats(vtype.minimum or 0.0, top, allow_nan=False, allow_infinity=False)
    if isinstance(vtype, Bool):
        return st.booleans()
    if isinstance(vtype, Time):
        return st.one_of(st.integers(vtype.minimum or 0, 400 * 86400), st.just(INFINITY))
    if isinstance(vtype, Choice):
        return st.sampled_from(vtype.choices)
    if isinstance(vtype, Days):
        return st.sets(st.sampled_from(DAY_NAMES), min_size=1).map(
            lambda days: tuple(d for d in DAY_NAMES if d in days))
    if isinstance(vtype, List):
        item = st.sampled_from(vtype.item.choices) if vtype.item else _NAME
        return st.lists(item, min_size=1, max_size=4).map(tuple)
    if isinstance(vtype, Throttle):
        return st.integers(-1, 500).flatmap(lambda soft: st.tuples(
            st.just(soft), st.just(-1) if soft == -1 else st.integers(soft, 1000)))
    if isinstance(vtype, FsTarget):
        return st.builds(FairshareTarget, st.floats(0.0, 100.0, allow_nan=False),
                         st.sampled_from(("TARGET", "FLOOR", "CEILING", "CAP")))
    if isinstance(vtype, Resources):
        return st.dictionaries(st.sampled_from(("PROCS", "MEM", "DISK", "SWAP", "GPU")),
                               st.integers(-1, 10**6), min_size=1)
    if isinstance(vtype, Availability):
        return st.dictionaries(st.sampled_from(("DEFAULT", "PROCS", "MEM", "DISK", "SWAP")),
                               st.sampled_from(Availability.policies.choices), min_size=1)
    if isinstance(vtype, Str):
        return _WORD
    raise AssertionError(f"no strategy for {vtype!r}")


_PLAIN = sorted(PARAMETERS)


@st.composite
def plain_settings(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(_PLAIN), unique=True, max_size=12))
    return {name: draw(value_strategy(PARAMETERS[name].type)) for name in names}


@st.composite
def objects(draw: st.DrawFn, keys: dict[str, ValueType]) -> dict[str, dict[str, Any]]:
    names = draw(st.lists(_NAME, unique=True, max_size=3))
    result = {}
    for name in names:
        chosen = draw(st.lists(st.sampled_from(sorted(keys)), unique=True, min_size=1,
                               max_size=5))
        result[name] = {key: draw(value_strategy(keys[key])) for key in chosen}
    return result


_PERIOD = {"DAY": 86400, "WEEK": 7 * 86400}


def _in_period(values: dict[str, Any]) -> dict[str, Any]:
    """A standing reservation's STARTTIME/ENDTIME brought inside its PERIOD (the reader
    refuses a start past the end of its day or week)."""
    length = _PERIOD.get(values.get("PERIOD", "DAY"))
    if length is None:
        return values
    return {k: v % length if k in ("STARTTIME", "ENDTIME") else v for k, v in values.items()}


def _line(head: str, keys: dict[str, ValueType], values: dict[str, Any], style: int) -> str:
    pairs = [f"{k}={keys[k].format(v)}" for k, v in values.items()]
    if style == 1 and len(pairs) > 1:  # split over continuation lines
        return f"{head} {pairs[0]} \\\n    " + " \\\n    ".join(pairs[1:]) + "\n"
    if style == 2:
        return f"{head} {' '.join(pairs)}   # comment = ignored [x]\n"
    return f"{head} {' '.join(pairs)}\n"


_USER_KEYS = OBJECT_PARAMETERS["USERCFG"].keys
_QOS_KEYS = OBJECT_PARAMETERS["QOSCFG"].keys


@FAST
@given(plain=plain_settings(), users=objects(_USER_KEYS), qos=objects(_QOS_KEYS),
       srs=objects(SRCFG_KEYS), nodes=objects(NODECFG_KEYS),
       style=st.integers(0, 2), eq=st.booleans())
def test_generated_config_reads_back(plain: dict[str, Any], users: dict, qos: dict,
                                     srs: dict, nodes: dict, style: int, eq: bool) -> None:
    srs = {name: _in_period(values) for name, values in srs.items()}
    text = "# generated\n"
    for name, value in plain.items():
        sep = "=" if eq else "   "
        text += f"{name}{sep}{PARAMETERS[name].type.format(value)}\n\n"
    for head, keys, table in (("USERCFG", _USER_KEYS, users), ("QOSCFG", _QOS_KEYS, qos),
                              ("SRCFG", SRCFG_KEYS, srs), ("NODECFG", NODECFG_KEYS, nodes)):
        for name, values in table.items():
            text += _line(f"{head}[{name}]", keys, values, style)
    cfg = parse_maui_config(text)
    assert cfg.warnings == []
    for name, value in plain.items():
        assert cfg.get(name) == value, (name, text)
        assert cfg.is_set(name)
    assert cfg.credentials("USER") == users
    assert cfg.credentials("QOS") == qos
    assert cfg.node_configs == nodes
    for name, values in srs.items():
        sr = cfg.standing_reservations[name]
        assert {k: sr[k] for k in values} == values
