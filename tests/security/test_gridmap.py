"""Grid map parsing and authorization (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from grid_tasks.errors import GridTasksError, SourceError
from grid_tasks.security.errors import GridMapError, Unauthorized
from grid_tasks.security.gridmap import GridMap

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "grid-mapfile.example"
ALICE = "/O=Grid/OU=Physics/CN=Alice Smith"

TEXT = '''# people
"/O=Grid/OU=Physics/CN=Alice Smith"  alice, asmith   # default alice
bob@example.org bob
"/CN=Quote \\"Q\\" and \\\\ back"  quinn

[rmB]
"/O=Grid/OU=Physics/CN=Alice Smith" alice_b
"/CN=Only B" onlyb
'''


def test_global_lines_hold_on_every_rm_and_first_account_is_default():
    gm = GridMap.parse(TEXT, "gm")
    granted = gm.authorize(ALICE, "rmA")
    assert (granted.name, granted.allowed, granted.rm, granted.line) == \
        ("alice", ("alice", "asmith"), "rmA", 2)
    assert gm.authorize(ALICE, "rmA", account="asmith").name == "asmith"
    assert gm.authorize("bob@example.org", "anyRM").name == "bob"
    assert gm.authorize('/CN=Quote "Q" and \\ back', "rmA").name == "quinn"


def test_section_replaces_the_global_line_on_its_rm_only():
    gm = GridMap.parse(TEXT, "gm")
    on_b = gm.authorize(ALICE, "rmB")
    assert (on_b.name, on_b.allowed, on_b.line) == ("alice_b", ("alice_b",), 7)
    with pytest.raises(Unauthorized, match="may not use account 'alice'"):
        gm.authorize(ALICE, "rmB", account="alice")
    assert gm.authorize("/CN=Only B", "rmB").name == "onlyb"
    with pytest.raises(Unauthorized) as info:
        gm.authorize("/CN=Only B", "rmA")
    assert isinstance(info.value, GridTasksError)
    assert (info.value.identity, info.value.rm) == ("/CN=Only B", "rmA")
    assert gm.sections() == ["rmB"] and gm.unknown_rms({"rmA"}) == ["rmB"]


def test_unmapped_identity_is_refused_and_matching_is_exact():
    gm = GridMap.parse(TEXT)
    for who in ("/O=Grid/OU=Physics/CN=Mallory", ALICE.lower(), ALICE + " ", "bob"):
        with pytest.raises(Unauthorized, match="not in the grid map"):
            gm.authorize(who, "rmA")
    with pytest.raises(Unauthorized):
        GridMap.parse("").authorize(ALICE, "rmA")


def test_crlf_line_endings_and_rebuildable_error():
    gm = GridMap.parse('"/CN=A B" a,b\r\n[rmB]\r\nx y\r\n')
    assert gm.authorize("/CN=A B", "rmB").allowed == ("a", "b")
    assert gm.authorize("x", "rmB").line == 3
    assert str(Unauthorized("refused")) == "refused"  # as a result backend rebuilds it


def test_example_file_parses():
    gm = GridMap.load(EXAMPLE)
    assert gm.authorize(ALICE, "rmB").name == "asmith"
    assert gm.authorize(ALICE, "rmA").name == "alice"
    assert gm.unknown_rms({"rmA", "rmB"}) == []


@pytest.mark.parametrize("text, line, column, words", [
    ('"/CN=x\n', 1, 1, "unterminated quoted identity"),
    ('ok a\n"/CN=x"   \n', 2, 11, "without a local account"),
    ('"/CN=x" a,\n', 1, 11, "after ','"),
    ('"/CN=x" a,,b\n', 1, 11, "after ','"),
    ('"/CN=x" a b\n', 1, 11, "separate accounts with ','"),
    ('"/CN=x" 9lives\n', 1, 9, "not a valid local account"),
    ('"/CN=x" a,a\n', 1, 11, "listed twice"),
    ('[rm A]\n', 1, 5, "expected ']'"),
    ('[]\n', 1, 2, "resource manager name"),
    ('[rmA] x a\n', 1, 7, "after the section header"),
    ('a b\n\n[rmB]\na c\n[rmB]\n', 5, 2, "already began on line 3"),
    ('a b\n# c\na c\n', 3, 1, "already mapped in the global part on line 1"),
    ('"  " x\n', 1, 1, "empty identity"),
    ('x [a]\n', 1, 3, "expected a local account name"),
])
def test_malformed_lines_give_line_and_column(text, line, column, words):
    with pytest.raises(GridMapError) as info:
        GridMap.parse(text, "grid-mapfile")
    err = info.value
    assert isinstance(err, SourceError)
    assert (err.source, err.line, err.column) == ("grid-mapfile", line, column)
    assert words in str(err)
    assert "^" in err.pretty()


def test_unreadable_file_is_typed(tmp_path):
    with pytest.raises(GridMapError, match="cannot read grid map"):
        GridMap.load(tmp_path / "missing")
    (tmp_path / "bin").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(GridMapError):
        GridMap.load(tmp_path / "bin")


identities = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1,
                     max_size=30).filter(lambda s: s.strip() == s and s)
accounts = st.from_regex(r"[a-z_][a-z0-9_-]{0,8}", fullmatch=True)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(identities, st.lists(accounts, min_size=1, max_size=3, unique=True),
                       max_size=6))
def test_quoted_round_trip_authorizes_every_written_identity(mapping):
    lines = []
    for identity, names in mapping.items():
        quoted = identity.replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'"{quoted}" {",".join(names)}')
    gm = GridMap.parse("\n".join(lines))
    for identity, names in mapping.items():
        granted = gm.authorize(identity, "rmX")
        assert granted.name == names[0] and granted.allowed == tuple(names)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=80))
def test_any_text_parses_or_fails_typed(text):
    try:
        GridMap.parse(text)
    except GridMapError as err:
        assert err.line is not None and err.line >= 1
