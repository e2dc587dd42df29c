"""Grid topology TOML: the example files, lookups, and located errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from grid_tasks.errors import ConfigError, NotFoundError
from grid_tasks.topology import (GridTopology, RMKind, SchedulerPlacement, load_topology,
                                 locate_key, parse_topology)

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "config"

GOOD = """\
[rm.rmA]
policy_file = "policies/a.cfg"
site = "north"

[rm.rmA.node.n1]
procs = 4
memory_mb = 1024
features = ["fast"]
arch = "x86_64"

[rm.rmB.node.n2]
procs = 2
site = "south"
"""


@pytest.mark.parametrize("name,policy", [("grid.toml", "maui.cfg"),
                                         ("demo-grid.toml", "demo.cfg")])
def test_example_files_have_two_rms_with_two_nodes(name, policy):
    topo = load_topology(CONFIG / name)
    assert set(topo.rms) == {"rmA", "rmB"}
    for rm in topo.rms.values():
        assert len(rm.nodes) == 2
        assert rm.policy_file == CONFIG / policy
    names = [n.name for n in topo.iter_nodes()]
    assert len(names) == len(set(names)) == 4


def test_parse_builds_specs_with_inherited_attributes(tmp_path):
    topo = parse_topology(GOOD, "g.toml", base_dir=tmp_path)
    assert isinstance(topo, GridTopology)
    n1 = topo.node("rmA", "n1")
    assert (n1.procs, n1.memory_mb, n1.disk_mb, n1.swap_mb) == (4, 1024, 0, 0)
    assert n1.features == ("fast",)
    assert topo.rm("rmA").policy_file == tmp_path / "policies" / "a.cfg"
    assert topo.rm("rmB").policy_file is None
    q = n1.query_attributes()
    assert q == {"name": "n1", "rm": "rmA", "procs": 4, "memory": 1024, "disk": 0,
                 "swap": 0, "features": ["fast"], "site": "north", "arch": "x86_64"}
    # a node's own attribute overrides its resource manager's
    assert topo.node("rmB", "n2").query_attributes()["site"] == "south"


def test_specs_are_hashable_and_compare_by_value():
    a, b = parse_topology(GOOD), parse_topology(GOOD)
    assert a == b
    nodes = {n: n.name for n in a.iter_nodes()}
    assert nodes[b.node("rmA", "n1")] == "n1"
    assert len({a.rm("rmA"), b.rm("rmA")}) == 1


def test_unknown_names_raise_not_found():
    topo = parse_topology(GOOD)
    with pytest.raises(NotFoundError, match="unknown resource manager 'rmZ'.*rmA, rmB"):
        topo.rm("rmZ")
    with pytest.raises(NotFoundError, match="unknown node 'n9'.*'rmA'.*n1"):
        topo.node("rmA", "n9")
    with pytest.raises(NotFoundError):
        topo.node("rmA", "n2")  # exists, but in rmB


BAD = [
    # (text, line, key, words)
    ("[rm.a.node.n]\nprocs = -1\n", 2, "rm.a.node.n.procs", "at least 1"),
    ("[rm.a.node.n]\nprocs = 2\nmemory_mb = \"lots\"\n", 3, "rm.a.node.n.memory_mb",
     "whole number"),
    ("[rm.a.node.n]\nprocs = 2.5\n", 2, "rm.a.node.n.procs", "whole number"),
    ("[rm.a.node.n]\nprocs = true\n", 2, "rm.a.node.n.procs", "whole number"),
    ("[rm.a.node.n]\nprocs = 1\n\n[rm.b.node.n]\nprocs = 2\n", 4, "rm.b.node.n", "duplicate"),
    ("[rm.a.node.n]\nmemory_mb = 2\n", 1, "rm.a.node.n", "needs 'procs'"),
    ("[rm.a.node.n]\nprocs = 1\nswap_mb = -5\n", 3, "rm.a.node.n.swap_mb", "at least 0"),
    ("[rm.a.node.n]\nprocs = 1\nfeatures = \"fast\"\n", 3, "rm.a.node.n.features", "list"),
    ("[rm.a.node.n]\nprocs = 1\nmemory = 4\n", 3, "rm.a.node.n.memory", "reserved"),
    ("[rm.a.node.n]\nprocs = 1\nextra = [1, 2]\n", 3, "rm.a.node.n.extra", "string, number"),
    ("[rm.\"a.b\".node.n]\nprocs = 1\n", 1, "rm.a.b", "invalid resource manager name"),
    ("[rm.a]\npolicy_file = 3\n[rm.a.node.n]\nprocs = 1\n", 2, "rm.a.policy_file",
     "policy_file"),
    ("[rm.a]\nsite = 'x'\n", 1, "rm.a", "no nodes"),
    ("[grid]\nname = 'x'\n", 1, "grid", "unknown top-level key"),
    ("# empty\n", None, "rm", "no resource managers"),
    ("[rm.a]\nnode = { n = { procs = 0 } }\n", 2, "rm.a.node.n.procs", "at least 1"),
]


@pytest.mark.parametrize("text, line, key, words", BAD)
def test_semantic_errors_name_file_line_and_key(text, line, key, words):
    with pytest.raises(ConfigError) as info:
        parse_topology(text, "bad.toml")
    err = info.value
    assert err.source == "bad.toml"
    assert err.line == line
    assert err.key == key
    assert words in err.message
    one_line = str(err)
    assert "\n" not in one_line and one_line.startswith("bad.toml")


def test_syntax_error_reports_line_and_column(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("[rm.a.node.n]\nprocs = 1\nfeatures = [\"x\"\n")
    with pytest.raises(ConfigError) as info:
        load_topology(path)
    assert info.value.source == str(path)
    assert info.value.line == 3  # the unclosed array runs to the end of the file
    assert info.value.column is not None
    assert "TOML syntax error" in str(info.value)
    assert "^" in info.value.pretty()


def test_duplicate_table_is_a_located_error():
    with pytest.raises(ConfigError) as info:
        parse_topology("[rm.a.node.n]\nprocs = 1\n[rm.a.node.n]\nprocs = 2\n", "d.toml")
    assert info.value.line == 3


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_topology(tmp_path / "nope.toml")


names = st.from_regex(r"[a-z][a-z0-9_-]{0,8}", fullmatch=True)


@hsettings(max_examples=40, deadline=None)
@given(st.dictionaries(names, st.integers(min_value=-3, max_value=64), min_size=1,
                       max_size=5))
def test_procs_accepted_iff_positive_and_error_line_points_at_it(procs):
    text = "".join(f"[rm.r.node.{n}]\nprocs = {p}\n\n" for n, p in procs.items())
    if all(p >= 1 for p in procs.values()):
        topo = parse_topology(text)
        assert {n.name: n.procs for n in topo.iter_nodes()} == procs
        return
    with pytest.raises(ConfigError) as info:
        parse_topology(text)
    first_bad = next(i for i, p in enumerate(procs.values()) if p < 1)
    assert info.value.line == 3 * first_bad + 2
    assert text.splitlines()[info.value.line - 1].startswith("procs")


def test_locate_key_handles_dotted_keys():
    text = "[rm.a]\nnode.n.procs = 1\n"
    assert locate_key(text, ("rm", "a", "node", "n", "procs")) == (2, 1)
    assert locate_key(text, ("other",)) == (None, None)


# --- hostile values: tomllib's recursion and int() digit limit, located by us ---

HUGE = "9" * 4301


def _position(text, culprit):
    offset = text.index(culprit)
    return text.count("\n", 0, offset) + 1, offset - (text.rfind("\n", 0, offset) + 1) + 1


@pytest.mark.parametrize(("text", "culprit", "key"), [
    (f"[rm.a.node.n]\nprocs = {HUGE}\n", HUGE, "rm.a.node.n.procs"),
    (f"[rm.a]\n# [[[ {{{{ \"\nsite = \"x = [[[\"\n[rm.a.node.n]\nprocs = 1\nbig = {HUGE}\n",
     HUGE, "rm.a.node.n.big"),
    (f"[rm.a.node.n]\nprocs = 1\nattrs = {{ k = {HUGE} }}\n", HUGE, "rm.a.node.n.attrs"),
    # the caret sits on the 101st open bracket: the outer '[' of line 2 is the first
    ("[[rm]]\nx = [\n  " + "[" * 3000 + "]" * 3000 + "\n]\n", (3, 2 + 100), "rm.x"),
    ("a = " + "{b=" * 3000 + "1" + "}" * 3000 + "\n", (1, 5 + 3 * 100), "a"),
], ids=["procs", "after-strings-and-comments", "inline-table", "deep-array", "deep-table"])
def test_hostile_values_are_located_config_errors(text, culprit, key):
    with pytest.raises(ConfigError) as info:
        parse_topology(text, "grid.toml")
    err = info.value
    where = culprit if isinstance(culprit, tuple) else _position(text, culprit)
    assert (err.line, err.column) == where and err.key == key
    expected = "nested more than 100 levels" if isinstance(culprit, tuple) else "4301 digits"
    assert expected in err.message
    assert err.pretty().splitlines()[-1].endswith("^")


def test_resource_counts_fit_a_32_bit_sql_integer():
    parse_topology("[rm.a.node.n]\nprocs = 2147483647\nmemory_mb = 2147483647\n")
    with pytest.raises(ConfigError) as info:
        parse_topology("[rm.a.node.n]\nprocs = 1\nmemory_mb = 2147483648\n")
    assert info.value.key == "rm.a.node.n.memory_mb" and info.value.line == 3
    assert "at most 2147483647" in info.value.message


def test_integer_attributes_are_64_bit_as_toml_says():
    topo = parse_topology("[rm.a.node.n]\nprocs = 1\nx = 9223372036854775807\n")
    assert topo.node("a", "n").attributes["x"] == 2**63 - 1
    with pytest.raises(ConfigError) as info:
        parse_topology("[rm.a.node.n]\nprocs = 1\nx = 9223372036854775808\n")
    assert info.value.key == "rm.a.node.n.x" and info.value.line == 3


def test_moderate_nesting_still_parses_to_the_usual_error():
    # 50 levels is legal TOML: tomllib reads it and the builder refuses the list
    text = "[rm.a.node.n]\nprocs = 1\nx = " + "[" * 50 + "]" * 50 + "\n"
    with pytest.raises(ConfigError, match="must be a string, number or boolean") as info:
        parse_topology(text)
    assert info.value.line == 3


def test_the_demo_grid_schedules_the_same_at_any_time_of_day():
    """The demo grid's policy is the example policy without its standing reservation
    (the weekday 08:00-18:00 one kept the demo's job that fills rmA waiting, and live
    tests on this grid failed by day): nothing else differs."""
    from grid_tasks.maui.cfg import load_maui_config

    demo, example = load_maui_config(CONFIG / "demo.cfg"), load_maui_config(CONFIG / "maui.cfg")
    assert demo.standing_reservations == {} and example.standing_reservations
    assert example.objects.pop("SRCFG") and "SRCFG" not in demo.objects
    assert demo.objects == example.objects  # credentials, nodes: the two never drift apart

    def values(cfg):
        return ({k: s.value for k, s in cfg.settings.items()},
                {k: {i: s.value for i, s in v.items()} for k, v in cfg.indexed.items()})

    assert values(demo) == values(example) and not demo.warnings


@pytest.mark.parametrize("text, line, key, meant", [
    ("[rm.a.node.n]\nprocs = 1\nmemroy_mb = 4096\n", 3, "rm.a.node.n.memroy_mb", "memory_mb"),
    ("[rm.a.node.n]\nprocs = 1\nfeature = ['ib']\n", 3, "rm.a.node.n.feature", "features"),
    ("[rm.a.node.n]\nprocs = 1\nMemory_MB = 4096\n", 3, "rm.a.node.n.Memory_MB", "memory_mb"),
    ("[rm.a]\npolcy_file = 'm.cfg'\n[rm.a.node.n]\nprocs = 1\n", 2, "rm.a.polcy_file",
     "policy_file"),
])
def test_a_misspelt_schema_key_is_refused_with_a_suggestion(text, line, key, meant):
    with pytest.raises(ConfigError) as info:
        parse_topology(text, "bad.toml")
    err = info.value
    assert (err.line, err.column, err.key) == (line, 1, key)
    assert f"did you mean {meant}?" in err.message


def test_a_node_resource_at_rm_level_is_refused():
    with pytest.raises(ConfigError) as info:
        parse_topology("[rm.a]\nmemory_mb = 4096\n[rm.a.node.n]\nprocs = 1\n", "bad.toml")
    assert info.value.line == 2 and "belongs to a node" in info.value.message


def test_free_attributes_still_work_at_both_levels():
    topo = parse_topology("[rm.a]\nsite = 'x'\nrack = 3\n[rm.a.node.n]\nprocs = 1\n"
                          "gpus = 2\narch = 'arm64'\nos = 'linux'\ncpu_model = 'z'\n"
                          "features = ['ib']\n")
    node = topo.node("a", "n")
    assert dict(node.attributes) == {"site": "x", "rack": 3, "gpus": 2, "arch": "arm64",
                                     "os": "linux", "cpu_model": "z"}
    assert node.features == ("ib",)


SLURM_TOPOLOGY = """\
[rm.rmA]
[rm.rmA.node.node1]
procs = 4

[rm.slurmA]
kind = "slurm"
slurm_conf = "clusters/a.conf"
partition = "all"
account = "grid"
output_dir = "out"
site = "east"
"""


def test_a_slurm_cluster_is_reached_not_listed(tmp_path):
    topo = parse_topology(SLURM_TOPOLOGY, "grid.toml", base_dir=tmp_path)
    spec = topo.rm("slurmA")
    assert spec.kind is RMKind.SLURM and spec.nodes == () and spec.policy_file is None
    assert spec.slurm.slurm_conf == tmp_path / "clusters/a.conf"
    assert (spec.slurm.partition, spec.slurm.account) == ("all", "grid")
    assert spec.slurm.output_dir == tmp_path / "out"
    assert spec.attributes == {"site": "east"}
    assert topo.rm("rmA").kind is RMKind.MAUI and topo.rm("rmA").slurm is None
    assert [s.name for s in topo.of_kind(RMKind.SLURM)] == ["slurmA"]
    assert [n.name for n in topo.iter_nodes()] == ["node1"]


@pytest.mark.parametrize("change,message,line", [
    ('kind = "slurm"\n', "needs slurm_conf", 1),
    ('kind = "pbs"\nslurm_conf = "a"\n', "kind must be one of 'maui', 'slurm'", 2),
    ('kind = "slurm"\nslurm_conf = "a"\n[rm.s.node.n1]\nprocs = 2\n', "does not apply to a Slurm", 4),
    ('kind = "slurm"\nslurm_conf = "a"\npartition = "a b"\n', "partition must be a Slurm name", 4),
    ('slurm_conf = "a"\n[rm.s.node.n1]\nprocs = 2\n', 'add kind = "slurm"', 2),
    ('kind = "slurm"\nslurm_conf = "a"\noutput_dir = 3\n', "output_dir must be a non-empty", 4),
])
def test_slurm_declarations_are_checked_with_their_line(change, message, line):
    with pytest.raises(ConfigError) as err:
        parse_topology("[rm.s]\n" + change, "grid.toml")
    assert message in str(err.value)
    assert err.value.line == line


def test_a_node_range_is_one_table_for_many_identical_nodes():
    topo = parse_topology('[rm.big]\nsite = "x"\n[rm.big.node."n[001-100]"]\nprocs = 4\n'
                          'features = ["fast"]\n[rm.big.node.login]\nprocs = 1\n')
    names = [n.name for n in topo.rm("big").nodes]
    assert names[:2] == ["n001", "n002"] and names[99] == "n100" and names[-1] == "login"
    assert topo.node("big", "n057").procs == 4 and topo.node("big", "n057").features == ("fast",)
    assert topo.node("big", "n057").attributes["site"] == "x"
    with pytest.raises(NotFoundError, match=r"known: n\[001-100\],login"):
        topo.node("big", "n101")  # the known names in their short form


@pytest.mark.parametrize("text,words", [
    ('[rm.a.node."n[3-1]"]\nprocs = 1\n', "backwards"),
    ('[rm.a.node."n[1-2]"]\nprocs = 1\n[rm.a.node.n2]\nprocs = 1\n', "duplicate node name"),
    ('[rm.a.node."n[1-x]"]\nprocs = 1\n', "whole numbers"),
])
def test_a_bad_node_range_is_a_config_error(text, words):
    with pytest.raises(ConfigError, match=words):
        parse_topology("[rm.a]\n" + text)


def test_a_thousand_node_topology_loads_fast(tmp_path):
    import time

    text = "".join(f'[rm.r{r}]\n[rm.r{r}.node."r{r}n[001-100]"]\nprocs = 2\n'
                   for r in range(10))
    spelled = "".join(f"[rm.r{r}]\n" + "".join(f"[rm.r{r}.node.r{r}n{n:03d}]\nprocs = 2\n"
                                               for n in range(1, 101)) for r in range(10))
    for body in (text, spelled):
        started = time.perf_counter()
        topo = parse_topology(body)
        for spec in topo.iter_nodes():
            topo.node(spec.rm, spec.name)
        assert sum(1 for _ in topo.iter_nodes()) == 1000
        assert time.perf_counter() - started < 1.0  # ~0.06 s measured


def test_an_rm_may_have_its_iterations_in_a_process_of_its_own():
    topo = parse_topology('[rm.a]\nscheduler = "own"\n[rm.a.node.n1]\nprocs = 1\n'
                          '[rm.b]\n[rm.b.node.n2]\nprocs = 1\n'
                          '[rm.c]\nscheduler = "shared"\n[rm.c.node.n3]\nprocs = 1\n')
    assert topo.rm("a").scheduler is SchedulerPlacement.OWN
    assert topo.rm("b").scheduler is SchedulerPlacement.SHARED  # the default
    assert topo.iterations(SchedulerPlacement.OWN) == ["a"]
    assert topo.iterations(SchedulerPlacement.SHARED) == ["b", "c"]
    assert "scheduler" not in topo.rm("a").attributes  # a setting, not a free attribute


@pytest.mark.parametrize("text,message,line,column", [
    ('[rm.a]\nsite = "x"\nscheduler = "alone"\n[rm.a.node.n1]\nprocs = 1\n',
     "scheduler must be one of 'shared', 'own', got 'alone'", 3, 1),
    ('[rm.a]\n  scheduler = 1\n[rm.a.node.n1]\nprocs = 1\n',
     "scheduler must be one of 'shared', 'own', got 1", 2, 3),
    ('[rm.s]\nkind = "slurm"\nslurm_conf = "a"\nscheduler = "own"\n',
     "does not apply to a Slurm cluster", 4, 1),
])
def test_a_bad_scheduler_placement_names_line_and_column(text, message, line, column):
    with pytest.raises(ConfigError) as err:
        parse_topology(text, "grid.toml")
    assert message in str(err.value)
    assert (err.value.line, err.value.column) == (line, column)
