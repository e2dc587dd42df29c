"""Unanswered heartbeats on the real (private) redis-server: the node is refreshed, the
shared connection carries no stray reply, and answered beats still come often enough."""

from __future__ import annotations

import time

import pytest
import redis

from grid_tasks.node.daemon import Heartbeat
from grid_tasks.node.quiet_beat import ANSWER_EVERY, answer_due
from grid_tasks.node.registry import NodeRegistry, alive_key, heartbeat_payload, node_key

RES = {"procs": 1, "memory_mb": 64, "disk_mb": 1, "swap_mb": 0}


def _one_connection(url: str) -> redis.Redis:
    """A node daemon's client: one connection that every thread takes turns on."""
    return redis.Redis(connection_pool=redis.BlockingConnectionPool.from_url(
        url, max_connections=1, timeout=5, socket_timeout=5))


@pytest.fixture
def client(settings):
    c = _one_connection(settings.redis_url)
    yield c
    c.close()


def test_a_quiet_beat_refreshes_the_node_and_leaves_no_reply_behind(client):
    registry = NodeRegistry(client, ttl=30.0)
    registry.register("rmA", "node1", RES, {}, "configured", time.time())
    client.delete(alive_key("rmA", "node1"))
    quiet = registry.quiet_beat("rmA", "node1")
    assert quiet.supported()
    now = time.time()
    quiet.send(heartbeat_payload(now, 2), now)
    # The same connection's next commands read their own replies: a reply the beat left
    # (its EVAL's 0, or CLIENT REPLY's OK) would be read by GET in place of the value.
    assert client.get(alive_key("rmA", "node1")) == heartbeat_payload(now, 2).encode()
    assert client.hget(node_key("rmA", "node1"), "last_heartbeat") == repr(now).encode()
    assert 0 < client.pttl(alive_key("rmA", "node1")) <= 30_000
    assert client.echo("after") == b"after"


def test_a_quiet_beat_on_a_connection_the_server_closed_goes_out_on_a_new_one(
        redis_server, client):
    registry = NodeRegistry(client, ttl=30.0)
    registry.register("rmA", "node1", RES, {}, "configured", time.time())
    admin = redis.Redis.from_url(redis_server.url(0))
    try:
        admin.client_kill_filter(_id=client.client_id())  # as a restart or a timeout does
        time.sleep(0.05)
        now = time.time()
        registry.quiet_beat("rmA", "node1").send(heartbeat_payload(now, 0), now)
        # written to the closed socket, the beat would be lost without an error
        assert client.hget(node_key("rmA", "node1"), "last_heartbeat") == repr(now).encode()
    finally:
        admin.close()


def test_a_redis_user_without_client_reply_gets_answered_beats(settings, redis_server, client):
    admin = redis.Redis.from_url(redis_server.url(0))
    admin.acl_setuser("quiet-beat-test", enabled=True, passwords=["+pw-quiet"], keys=["*"],
                      commands=["+@all", "-client"])
    try:
        url = settings.redis_url.replace(f"//:{redis_server.password}@",
                                         "//quiet-beat-test:pw-quiet@")
        limited = _one_connection(url)
        quiet = NodeRegistry(limited, ttl=30.0).quiet_beat("rmA", "node1")
        assert quiet.supported() is False
        # the refused probe's replies were dropped with its connection, not handed on
        assert limited.echo("next") == b"next"
        limited.close()
        assert NodeRegistry(client, ttl=30.0).quiet_beat("rmA", "node1").supported()
    finally:
        admin.acl_deluser("quiet-beat-test")
        admin.close()


def test_answered_beats_are_the_first_every_sixth_after_a_failure_or_a_late_one():
    ttl = 9.0
    assert answer_due(0, 0, False, None, ttl)  # the first
    assert not answer_due(1, 0, True, 5.0, ttl)
    assert answer_due(6, ANSWER_EVERY - 1, True, 5.0, ttl)  # every sixth
    assert answer_due(3, 2, False, 5.0, ttl)  # after a beat that failed
    assert answer_due(3, 2, True, 9.5, ttl)  # a TTL since the last: the key may be gone
    assert not answer_due(3, 2, True, 8.9, ttl)


def _commands(admin: redis.Redis) -> dict[str, int]:
    stats = admin.info("commandstats")
    return {name: stats.get(f"cmdstat_{name}", {"calls": 0})["calls"]
            for name in ("eval", "evalsha")}


def test_a_daemons_heartbeat_goes_mostly_unanswered_and_still_finds_the_node_back(
        settings, redis_server, client):
    registry = NodeRegistry(client, ttl=0.5)
    registry.register("rmA", "node1", RES, {}, "configured", time.time())
    admin = redis.Redis.from_url(redis_server.url(0))
    revived = []
    before = _commands(admin)
    hb = Heartbeat(registry, "rmA", "node1", 0.05, on_revived=lambda: revived.append(1),
                   quiet=registry.quiet_beat("rmA", "node1"))
    hb.start()
    try:
        time.sleep(0.8)
        assert registry.status("rmA", "node1").state.value == "Idle"
        after = _commands(admin)
        quiet = after["eval"] - before["eval"]
        answered = after["evalsha"] - before["evalsha"]
        assert quiet >= 3 * answered > 0, (quiet, answered)
        client.delete(alive_key("rmA", "node1"))  # as if it had expired
        deadline = time.monotonic() + ANSWER_EVERY * 0.05 + 1.0
        while not revived and time.monotonic() < deadline:
            time.sleep(0.02)
        assert revived, "no answered beat noticed the node had been Unknown"
    finally:
        hb.stop()
        admin.close()
