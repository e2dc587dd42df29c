"""An idle node daemon's event loop: it waits as long as nothing is due, and kombu's
periodic checks share one wake-up."""

from __future__ import annotations

import kombu
from kombu.asynchronous import Hub
from kombu.asynchronous.timer import Timer

from grid_tasks.node.event_loop import wake_only_when_due
from grid_tasks.node.transport import TRANSPORT_PATH


def _hub_with_a_timer_in(seconds: float) -> Hub:
    hub = Hub(Timer(max_interval=10.0))  # as Celery's Timer step makes it
    hub.call_later(seconds, lambda: None)
    return hub


def test_the_loop_waits_for_its_next_timer_not_kombus_10_s():
    plain = _hub_with_a_timer_in(25.0)
    assert plain.fire_timers() <= 10.0  # what every worker does
    lean = _hub_with_a_timer_in(25.0)
    lean.fire_timers()  # its timer iterator already made, with the old cap
    wake_only_when_due(lean, 30.0)
    assert 24.0 < lean.fire_timers() <= 25.0
    empty = Hub(Timer(max_interval=10.0))
    wake_only_when_due(empty, 30.0)
    assert empty.fire_timers() == 1  # nothing scheduled: kombu's min_delay, as before


def _registered(url: str) -> tuple[kombu.Connection, Hub]:
    conn = kombu.Connection(url, transport=TRANSPORT_PATH)
    conn.default_channel  # noqa: B018 - opens the channel the cycle polls
    hub = Hub(Timer(max_interval=10.0))
    conn.transport.register_with_event_loop(conn.connection, hub)
    return conn, hub


def _live(hub: Hub) -> list:
    """The hub's timer entries not cancelled."""
    return [s.entry for s in hub.timer.queue if not s.entry.canceled]


def test_kombus_five_periodic_checks_run_in_one_upkeep(redis_server, monkeypatch):
    conn, hub = _registered(redis_server.url(1))
    try:
        periodic = _live(hub)
        assert len(periodic) == 1  # kombu's transport registers five
        cycle = conn.transport.cycle
        ran: list[str] = []
        names = ("maybe_restore_messages", "maybe_check_subclient_health",
                 "maybe_check_brpop_health", "maybe_reauth", "maybe_refresh_binding_expiry")
        for name in names:
            def check(name: str = name) -> None:
                ran.append(name)
                if name == "maybe_check_subclient_health":
                    raise ConnectionError("Redis away")  # must not skip the rest
            monkeypatch.setattr(cycle, name, check)
        periodic[0]()
        assert ran == list(names)
    finally:
        conn.release()


def test_a_reconnect_replaces_the_upkeep_rather_than_adding_one(redis_server):
    conn, hub = _registered(redis_server.url(1))
    try:
        conn.transport.register_with_event_loop(conn.connection, hub)  # as on reconnect
        assert len(_live(hub)) == 1
    finally:
        conn.release()
