"""Node registry in a real (private) Redis: registration, heartbeat TTL, derived states."""

from __future__ import annotations

import time

import pytest

from grid_tasks.errors import ConnectivityError
from grid_tasks.node.registry import NodeRegistry, node_state
from grid_tasks.states import NodeState
from grid_tasks.topology import load_topology

RES = {"procs": 3, "memory_mb": 512, "disk_mb": 10, "swap_mb": 0, "features": ["x"],
       "attributes": {"arch": "x86_64"}}


def test_state_is_derived_from_heartbeat_and_goodbye():
    assert node_state({"at": 1.0, "active": 0}, {"status": "Up"}) is NodeState.IDLE
    assert node_state({"at": 1.0, "active": 2}, {"status": "Up"}) is NodeState.RUNNING
    assert node_state(None, {"status": "Up"}) is NodeState.UNKNOWN
    assert node_state(None, {"status": "Down"}) is NodeState.DOWN
    assert node_state(None, None) is NodeState.UNKNOWN


@pytest.fixture
def registry(settings):
    return NodeRegistry.from_url(settings.redis_url, ttl=0.3)


def test_register_then_silence_turns_unknown_by_itself(registry):
    registry.register("rmA", "node1", RES, {"hostname": "h1"}, "configured", now=time.time())
    s = registry.status("rmA", "node1")
    assert s.state is NodeState.IDLE
    assert (s.procs, s.memory_mb, s.features, s.host, s.source) == (3, 512, ("x",), "h1",
                                                                    "configured")
    registry.heartbeat("rmA", "node1", time.time(), active=1)
    assert registry.status("rmA", "node1").state is NodeState.RUNNING
    time.sleep(0.45)  # nobody acts: the key expires
    s = registry.status("rmA", "node1")
    assert s.state is NodeState.UNKNOWN
    assert s.last_heartbeat is not None and s.procs == 3  # what we knew stays visible


def test_goodbye_shows_down_and_reregistering_revives(registry):
    registry.register("rmB", "node3", RES, {}, "detected", now=1000.0)
    registry.mark_down("rmB", "node3", now=1001.0)
    assert registry.status("rmB", "node3").state is NodeState.DOWN
    registry.register("rmB", "node3", RES, {}, "detected", now=1002.0)
    assert registry.status("rmB", "node3").state is NodeState.IDLE


def test_list_includes_unregistered_topology_nodes(registry, settings):
    topo = load_topology(settings.topology_file)
    registry.register("rmA", "node1", RES, {}, "configured", now=time.time())
    registry.register("rmX", "stray", RES, {}, "detected", now=time.time())
    listed = {(s.rm, s.node): s for s in registry.list_nodes(topo)}
    assert set(listed) == {("rmA", "node1"), ("rmA", "node2"), ("rmB", "node3"),
                           ("rmB", "node4"), ("rmX", "stray")}
    never = listed[("rmB", "node4")]
    assert never.state is NodeState.UNKNOWN and never.last_heartbeat is None
    assert never.procs == 2 and never.source == "topology"  # from the topology file
    assert listed[("rmA", "node1")].state is NodeState.IDLE


def test_unreachable_redis_is_a_connectivity_error():
    dead = NodeRegistry.from_url("redis://127.0.0.1:1/3", ttl=1)
    with pytest.raises(ConnectivityError, match="cannot reach Redis at 127.0.0.1:1"):
        dead.list_nodes()


def test_wrong_password_is_a_connectivity_error(redis_server):
    bad = NodeRegistry.from_url(redis_server.url(3).replace("@", "nope@", 1), ttl=1)
    with pytest.raises(ConnectivityError, match="refused the credentials"):
        bad.status("rmA", "node1")


def test_wait_alive_names_missing_nodes(registry):
    registry.register("rmA", "node1", RES, {}, "configured", now=time.time())
    with pytest.raises(ConnectivityError, match="rmA/node2"):
        registry.wait_alive([("rmA", "node1"), ("rmA", "node2")], timeout=0.2)


def test_many_identities_register_beat_and_say_goodbye_in_one_round_trip_each(registry):
    names = [("rmA", f"h{i}") for i in range(5)]
    registry.register_many([(rm, n, RES) for rm, n in names], {"hostname": "one"},
                           "configured", time.time())
    assert [s.state for s in registry.statuses(names)] == [NodeState.IDLE] * 5
    assert {s.host for s in registry.statuses(names)} == {"one"}
    # beats: none was dead ...
    assert registry.heartbeat_many([(rm, n, 0) for rm, n in names], time.time()) == []
    time.sleep(0.45)  # ... then all expired: every one comes back revived
    assert registry.heartbeat_many([(rm, n, 1 if n == "h2" else 0) for rm, n in names],
                                   time.time()) == names
    assert registry.status("rmA", "h2").state is NodeState.RUNNING
    registry.mark_down_many(names[:2], time.time())
    assert [s.state for s in registry.statuses(names)] == [NodeState.DOWN] * 2 + [
        NodeState.RUNNING, NodeState.IDLE, NodeState.IDLE]


def test_listing_one_rm_reads_only_its_nodes(registry, settings):
    topo = load_topology(settings.topology_file)
    registry.register("rmA", "node1", RES, {}, "configured", time.time())
    registry.register("rmB", "node3", RES, {}, "configured", time.time())
    registry.register("rmZ", "stray", RES, {}, "detected", time.time())
    assert [s.node for s in registry.list_nodes(rm="rmA")] == ["node1"]
    assert [s.node for s in registry.list_nodes(topo, rm="rmB")] == ["node3", "node4"]
    assert [s.node for s in registry.list_nodes(topo, rm="rmZ")] == ["stray"]
    assert len(registry.list_nodes(topo)) == 5  # without rm: every node, as before


def test_states_alone_agree_with_full_statuses(registry):
    names = [("rmA", "up"), ("rmA", "busy"), ("rmA", "gone"), ("rmA", "silent"),
             ("rmA", "never")]
    now = time.time()
    registry.register_many([(rm, n, RES) for rm, n in names[:4]], {}, "configured", now)
    registry.heartbeat("rmA", "busy", now, active=2)
    registry.mark_down("rmA", "gone", now)
    registry.client.delete("grid_tasks:alive:rmA:silent")  # its TTL ran out
    expected = {(s.rm, s.node): s.state for s in registry.statuses(names)}
    assert registry.states(names) == expected == {
        ("rmA", "up"): NodeState.IDLE, ("rmA", "busy"): NodeState.RUNNING,
        ("rmA", "gone"): NodeState.DOWN, ("rmA", "silent"): NodeState.UNKNOWN,
        ("rmA", "never"): NodeState.UNKNOWN}


def _calls(client) -> dict[str, int]:
    """Commands the server ran so far, by name (INFO itself left out)."""
    return {k.removeprefix("cmdstat_"): v["calls"]
            for k, v in client.info("commandstats").items() if k != "cmdstat_info"}


def _ran(client, action) -> dict[str, int]:
    before = _calls(client)
    action()
    after = _calls(client)
    return {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)}


def test_states_of_many_nodes_cost_one_command_plus_one_per_silent_node(registry):
    names = [("rmA", f"n{i:03d}") for i in range(60)]
    registry.register_many([(rm, n, RES) for rm, n in names], {}, "configured", time.time())
    registry.client.delete("grid_tasks:alive:rmA:n007", "grid_tasks:alive:rmA:n042")
    got: dict = {}
    ran = _ran(registry.client, lambda: got.update(registry.states(names)))
    assert ran == {"mget": 1, "hget": 2}  # not two commands per node
    assert [n for (_, n), s in got.items() if s is NodeState.UNKNOWN] == ["n007", "n042"]
    assert registry.states([]) == {}


def test_an_rms_node_names_do_not_read_the_other_rms(registry):
    registry.register_many([("rmA", f"a{i}", RES) for i in range(3)]
                           + [("rmB", f"b{i}", RES) for i in range(200)], {}, "configured",
                           time.time())
    names: list = []
    ran = _ran(registry.client, lambda: names.extend(registry.node_names("rmA")))
    assert names == ["a0", "a1", "a2"]
    assert ran == {"smembers": 1}
    assert registry.client.scard("grid_tasks:rmnodes:rmA") == 3
    # a registration from before the per-RM sets is still found, in the grid-wide set
    registry.client.sadd("grid_tasks:nodes", "rmOld/x1")
    assert registry.node_names("rmOld") == ["x1"]


def test_many_heartbeats_are_one_script_call(registry):
    names = [("rmA", f"h{i:03d}") for i in range(120)]
    registry.register_many([(rm, n, RES) for rm, n in names], {}, "configured", time.time())
    registry.client.delete("grid_tasks:alive:rmA:h005")
    revived: list = []
    ran = _ran(registry.client, lambda: revived.extend(registry.heartbeat_many(
        [(rm, n, 0) for rm, n in names], time.time())))
    assert revived == [("rmA", "h005")]
    assert ran.get("evalsha", 0) + ran.get("eval", 0) == 1  # not three commands a node
    assert sum(ran.values()) <= 3 * 120 + 1 and "exists" not in ran
    assert registry.client.pttl("grid_tasks:alive:rmA:h005") > 0
