"""Small habits of the operator commands: which RM a node is on, and saying each RM once."""

from __future__ import annotations

import pytest

from grid_tasks.cli.reservations import _pick_rm
from grid_tasks.db import get_engine, session_factory
from grid_tasks.ops import OpsError
from grid_tasks.ops.gridcli import released_on
from tests.cli import test_ops_cli
from tests.cli.test_ops_cli import offline, run

ops = test_ops_cli.ops  # the fixture (the demo topology: rmA node1-2, rmB node3-4)


def test_releaseres_grid_names_each_rm_once_in_order() -> None:
    parts = [{"rm": "rmA", "released": True, "error": None},
             {"rm": "rmB", "released": True, "error": None},
             {"rm": "rmA", "released": True, "error": None}]
    assert released_on(parts) == "rmA, rmB"
    parts[2] = {"rm": "rmA", "released": False, "error": "unreachable"}
    assert released_on(parts) == "rmA (unreachable), rmB"


def test_checknode_in_the_wrong_rm_lists_that_rms_nodes(ops) -> None:
    env, _, _, _ = ops
    bad = run(offline(env), "checknode", "node1", "-r", "rmB", ok=False)
    assert bad.exit_code == 1
    assert "rmB's nodes: node3, node4" in bad.stderr and "it is in 'rmA'" in bad.stderr
    assert "node2" not in bad.stderr


@pytest.mark.parametrize("hosts, rm", [("node1", "rmA"), ("node3,node4", "rmB"),
                                       ("2@node2", "rmA"), ("node[34]", "rmB")])
def test_setres_finds_the_rm_of_the_nodes_it_names(ops, hosts: str, rm: str) -> None:
    _, _, settings, _ = ops
    with session_factory(get_engine(settings.database_url))() as session:
        assert _pick_rm(session, None, hosts) == rm
        assert _pick_rm(session, "rmB", "node3") == "rmB"  # --rm still wins


@pytest.mark.parametrize("hosts, words", [("TASKS==2", "give --rm RM"),
                                          ("ALL", "give --rm RM"),
                                          ("node1,node3", "spans resource managers rmA, rmB")])
def test_setres_asks_for_rm_only_when_the_nodes_do_not_say(ops, hosts: str,
                                                           words: str) -> None:
    _, _, settings, _ = ops
    with session_factory(get_engine(settings.database_url))() as session:
        with pytest.raises(OpsError, match=words):
            _pick_rm(session, None, hosts)
