"""The collection: MIL queries over RMs and nodes, live state, access restrictions."""

from __future__ import annotations

import pytest

from grid_tasks.errors import ConfigError
from grid_tasks.legion.collection import Access, Collection, Requester, ResourceKind
from grid_tasks.mil import MILError
from grid_tasks.node.registry import NodeRegistry
from grid_tasks.settings import Settings
from grid_tasks.states import NodeState
from grid_tasks.topology import parse_topology

GRID = """
[rm.open]
site = "north"

[rm.open.node.o1]
procs = 8
memory_mb = 16384
features = ["gpu"]

[rm.open.node.o2]
procs = 4
memory_mb = 8192
allow_hosts = "*.lab.example.org, login1"

[rm.physics]
allow_groups = "physics hep"

[rm.physics.node.p1]
procs = 16
memory_mb = 65536

[rm.physics.node.p2]
procs = 16
memory_mb = 65536
allow_users = "alice"
"""

ALICE = Requester("alice", ("users", "hep"), "ws3.lab.example.org")
BOB = Requester("bob", ("users",), "login1")
CAROL = Requester("carol", ("physics",), "home.example.net")


@pytest.fixture
def topology():
    return parse_topology(GRID, "grid.toml")


def keys(resources) -> list[str]:
    return [r.key for r in resources]


@pytest.mark.parametrize("who, expected", [
    (ALICE, ["open/o1", "open/o2", "physics/p1", "physics/p2"]),
    (BOB, ["open/o1", "open/o2"]),
    (CAROL, ["open/o1", "physics/p1"]),  # wrong host for o2; p2 is alice's alone
    (None, ["open/o1"]),                 # anonymous: unrestricted resources only
])
def test_queries_return_only_resources_admitting_the_requester(topology, who, expected):
    assert keys(Collection(topology).query("$procs >= 1", who)) == expected


def test_rm_resources_aggregate_their_nodes(topology) -> None:
    rms = {r.name: r for r in Collection(topology).resources(ResourceKind.RM)}
    assert rms["physics"].attributes["procs"] == 32 and rms["physics"].attributes["nodes"] == 2
    assert rms["open"].attributes["features"] == ["gpu"]
    found = Collection(topology).query('$procs >= 12 and $kind == "rm"', CAROL, kind=None)
    assert keys(found) == ["open", "physics"]
    assert keys(Collection(topology).query("$procs >= 12", BOB, kind="rm")) == ["open"]


def test_topology_attributes_and_features_are_queryable(topology) -> None:
    col = Collection(topology)
    assert keys(col.query('match($features, "^gpu$")', ALICE)) == ["open/o1"]
    assert keys(col.query('$site == "north"', ALICE)) == ["open/o1", "open/o2"]
    assert col.capacities() == {"open/o1": 8, "open/o2": 4, "physics/p1": 16,
                                "physics/p2": 16}


def test_bad_query_and_bad_restriction_are_typed(topology) -> None:
    with pytest.raises(MILError):
        Collection(topology).query("$procs >=", ALICE)
    bad = parse_topology("[rm.x]\nallow_users = 3\n[rm.x.node.n]\nprocs = 1\n")
    with pytest.raises(ConfigError, match="allow_users of resource manager x"):
        Collection(bad)


def test_access_patterns() -> None:
    access = Access.from_attributes({"allow_users": "ops-*,root"}, "here")
    assert access.admits(Requester("ops-7")) and access.admits(Requester("root"))
    assert not access.admits(Requester("rooty")) and not access.admits(None)
    assert Access().admits(None)
    assert Requester.current().user


def test_live_collection_from_the_registry(settings: Settings, topology) -> None:
    registry = NodeRegistry.from_url(settings.redis_url, ttl=30)
    registry.register("open", "o1", {"procs": 8}, {"hostname": "o1.lab"}, "configured", 1.0)
    registry.register("open", "o2", {"procs": 4}, {"hostname": "o2.lab"}, "configured", 1.0)
    registry.mark_down("open", "o2", 2.0)
    registry.register("extra", "x1", {"procs": 2, "features": ["new"]}, {}, "detected", 1.0)
    col = Collection.from_registry(topology, registry)
    nodes = {r.key: r.attributes for r in col.resources("node")}
    assert nodes["open/o1"]["state"] == NodeState.IDLE.value and nodes["open/o1"]["alive"]
    assert nodes["open/o1"]["host"] == "o1.lab"
    assert nodes["open/o2"]["state"] == NodeState.DOWN.value and not nodes["open/o2"]["alive"]
    assert nodes["physics/p1"]["state"] == NodeState.UNKNOWN.value
    assert nodes["extra/x1"]["procs"] == 2  # registered but not configured
    assert keys(col.query("$alive", ALICE)) == ["open/o1", "extra/x1"]
    assert keys(col.query('$state == "Down"', ALICE)) == ["open/o2"]
    rms = {r.name: r.attributes for r in col.resources("rm")}
    assert rms["open"]["alive_nodes"] == 1
    registry.client.close()
