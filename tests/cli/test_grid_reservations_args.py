"""``--grid`` planning commands refuse bad requests before connecting to anything."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from grid_tasks.broker.gridres import GridReservationError, parse_grid_spec
from grid_tasks.cli import main


@pytest.mark.parametrize("args, words", [
    (["setres", "--grid", "-u", "bob", "-d", "2:00", "1"], ["no --rm, ACL"]),
    (["setres", "--grid", "--rm", "rmA", "-d", "2:00", "1"], ["no --rm"]),
    (["setres", "--grid", "-d", "1:00", "-e", "+2:00", "1"], ["not both"]),
])
def test_setres_grid_refuses_options_it_cannot_honour(args, words):
    result = CliRunner().invoke(main, args)
    assert result.exit_code != 0
    for word in words:
        assert word in result.output


def test_grid_specs_are_read_or_refused_naming_the_item():
    subs = parse_grid_spec("4@rmA, 2@rmB,2, 1@rmA", 90.0)
    assert [(s.rm_contact, s.count, s.label) for s in subs] == [
        ("rmA", 4, "part0"), ("rmB", 2, "rmB"), (None, 2, "part2"), ("rmA", 1, "part3")]
    assert {s.max_wall_time_s for s in subs} == {90}
    rsl = parse_grid_spec("+(&(executable=x)(count=2)(maxWallTime=1))(&(executable=y))", 30.0)
    assert [(s.count, s.max_wall_time_s) for s in rsl] == [(2, 30), (1, 30)]
    assert parse_grid_spec("&(executable=x)(maxWallTime=2)", None)[0].max_wall_time_s == 120
    with pytest.raises(GridReservationError, match="item 2 'x'"):
        parse_grid_spec("2@rmA,x", 60.0)
    with pytest.raises(GridReservationError, match="-d DURATION"):
        parse_grid_spec("2@rmA", None)
    with pytest.raises(GridReservationError, match="finite positive"):
        parse_grid_spec("2", float("inf"))
