"""The node transport: every channel of a process on one command connection, and a
closing consumer that does not wait out its BRPOP."""

from __future__ import annotations

import os
import signal
import time

import kombu
import redis

from grid_tasks.node.transport import TRANSPORT_PATH

NAME = "transport-test"


def _named(admin: redis.Redis) -> int:
    return sum(1 for c in admin.client_list() if c["name"] == NAME)


def _publish_on_channels(url: str, transport: str | None, channels: int) -> tuple[int, list]:
    conn = kombu.Connection(url, transport=transport,
                            transport_options={"client_name": NAME, "polling_interval": 10})
    chans = [conn.channel() for _ in range(channels)]
    for i, chan in enumerate(chans):
        kombu.Producer(chan).publish({"n": i}, routing_key="transport-test-q")
    return conn, chans


def test_channels_share_one_command_connection_where_kombus_own_hold_two_each(redis_server):
    admin = redis.Redis.from_url(redis_server.url(0))
    try:
        for transport, expected in ((TRANSPORT_PATH, 1), (None, 6)):
            before = _named(admin)  # the shared connection outlives its kombu connection
            conn, _ = _publish_on_channels(redis_server.url(1), transport, 3)
            try:
                assert _named(admin) - before == expected, transport
            finally:
                conn.release()
    finally:
        admin.delete("transport-test-q")  # db 0 of the private server only
        admin.close()


def test_a_consumer_parked_on_a_long_brpop_closes_at_once(redis_server):
    """kombu reads the pending BRPOP reply on close: its own transport waits out the
    10 s poll there; the node transport unblocks it first."""
    conn = kombu.Connection(redis_server.url(1), transport=TRANSPORT_PATH,
                            transport_options={"polling_interval": 10})
    chan = conn.channel()
    queue = kombu.Queue("transport-test-idle", channel=chan)
    queue.declare()
    queue.consume(callback=lambda message: None)
    conn.transport.cycle.on_poll_start()  # what the event loop does: BRPOP sent
    assert chan._in_poll
    began = time.monotonic()
    chan.close()
    assert time.monotonic() - began < 2.0
    conn.release()


def test_a_node_daemon_stops_at_once_on_sigterm_not_a_poll_later(node_worker):
    """SIGTERM only sets Celery's stop flag, which its loop sees when BRPOP returns: the
    shutdown signal wakes the parked BRPOP, or a daemon took 7-10 s to stop (the poll)."""
    child = node_worker("rmA", "node1")
    time.sleep(3.0)  # parked in its long BRPOP
    began = time.monotonic()
    os.killpg(child.pid, signal.SIGTERM)
    child.process.wait(timeout=15)
    assert time.monotonic() - began < 3.0


def test_queue_key_names_are_kombus_and_made_once():
    """The BRPOP key of each queue and priority step is kombu's own name, made once per
    channel (a harness's BRPOP names every node queue at every step per message)."""
    from kombu.transport import redis as kombu_redis

    from grid_tasks.node import transport

    channel = transport.Channel.__new__(transport.Channel)
    channel._pri_keys = {}
    channel.priority_steps = kombu_redis.PRIORITY_STEPS
    made = []
    original = kombu_redis.Channel._q_for_pri

    def counted(self, queue, pri):
        made.append((queue, pri))
        return original(self, queue, pri)

    kombu_redis.Channel._q_for_pri = counted
    try:
        wanted = [(f"node.rmA.n{i}", pri) for i in range(3) for pri in (0, 3, 5, 9)]
        first = [channel._q_for_pri(q, p) for q, p in wanted]
        again = [channel._q_for_pri(q, p) for q, p in wanted]
    finally:
        kombu_redis.Channel._q_for_pri = original
    plain = kombu_redis.Channel.__new__(kombu_redis.Channel)
    plain.priority_steps = kombu_redis.PRIORITY_STEPS
    assert first == again == [original(plain, q, p) for q, p in wanted]
    assert made == wanted  # each name made once
