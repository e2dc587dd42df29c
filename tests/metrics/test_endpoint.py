"""The /metrics endpoint over HTTP, parsed by an independent Prometheus parser.

Every value comes from state the test creates for real: job rows and
reservations in SQL, messages in the broker's queues, node registrations in
Redis, iteration durations, broker tokens.
"""

from __future__ import annotations

import sys
import time
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from grid_tasks import db
from grid_tasks.errors import ConnectivityError
from grid_tasks.legion.tokens import Claim, TokenStore
from grid_tasks.metrics import MetricsServer, record_iteration
from grid_tasks.metrics.exposition import CONTENT_TYPE
from grid_tasks.node.registry import NodeRegistry
from grid_tasks.security.refusals import refuse
from grid_tasks.states import JobState, MauiJobState

NOW = time.time()


@pytest.fixture(autouse=True)
def _fresh_now(monkeypatch):
    """The reference time is when the test starts, not when the module was collected:
    in a full run the gap is minutes, longer than the one-minute reservation below."""
    monkeypatch.setattr(sys.modules[__name__], "NOW", time.time())


def _scrape(url: str) -> dict[tuple[str, frozenset], float]:
    with urllib.request.urlopen(url, timeout=10) as reply:
        assert reply.headers["Content-Type"] == CONTENT_TYPE
        text = reply.read().decode()
    values = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            values[(s.name, frozenset(s.labels.items()))] = s.value
    return values


def _value(values, name, **labels):
    return values[(name, frozenset((k, str(v)) for k, v in labels.items()))]


def _jobs(sessions, reservations=True):
    rows = [("rmA", JobState.ACTIVE, MauiJobState.RUNNING)] * 2 + \
           [("rmA", JobState.PENDING, MauiJobState.IDLE)] + \
           [("rmB", JobState.PENDING, MauiJobState.IDLE)] * 3 + \
           [("rmB", JobState.DONE, MauiJobState.COMPLETED)]
    at = datetime.fromtimestamp(NOW, tz=timezone.utc)
    with db.session_scope(sessions) as s:
        for rm, state, maui in rows:
            s.add(db.Job(rm=rm, state=state, maui_state=maui, procs=1, submit_time=at))
        for name, rm, kind, start, end in [] if not reservations else [
            ("maint", "rmA", "admin", -60, 3600), ("job.7", "rmB", "job", 600, 1200),
            ("gone", "rmA", "admin", -7200, -3600), ("grid.1", "rmB", "grid", -1, 60)]:
            s.add(db.Reservation(name=name, rm=rm, kind=kind,
                                 start_time=at + timedelta(seconds=start),
                                 end_time=at + timedelta(seconds=end)))


def _queues(app):
    for _ in range(3):
        app.send_task("grid_tasks.gram.tasks.probe", kwargs={"rm": "rmA"})
    for _ in range(2):
        app.send_task("grid_tasks.node.tasks.probe", kwargs={"rm": "rmB", "node": "node3"})
    app.send_task("grid_tasks.scheduling.tasks.probe")
    app.send_task("grid_tasks.scheduling.tasks.probe", priority=9)  # kombu: a sibling list
    app.send_task("grid_tasks.scheduling.tasks.iterate", kwargs={"rm": "rmB"})


def _redis_state(settings):
    registry = NodeRegistry.from_url(settings.redis_url, settings.heartbeat_ttl)
    registry.register("rmA", "node1", {"procs": 4}, {}, "configured", NOW)
    registry.register("rmA", "node2", {"procs": 4}, {}, "configured", NOW)
    registry.mark_down("rmA", "node2", NOW)
    client = redis.Redis.from_url(settings.redis_url)
    for seconds in (0.03, 0.03, 1.7):
        record_iteration(client, "rmA", seconds)
    store = TokenStore(client)
    store.set_capacities({"node3": 2, "node4": 2})
    held = store.take([Claim("node3", NOW + 100, NOW + 200, 1)], "broker-1", ttl=60)
    kept = store.take([Claim("node4", NOW + 100, NOW + 200, 2)], "broker-1", ttl=60)
    store.confirm(kept, "job-9")
    assert held
    return registry, client


@pytest.fixture
def server(grid_settings):
    srv = MetricsServer(grid_settings, port=0).start()
    yield srv
    srv.stop()


def test_scrape_reflects_real_state(grid_settings, sessions, celery_app_factory, server):
    _jobs(sessions)
    app = celery_app_factory(grid_settings)
    _queues(app)
    registry, client = _redis_state(grid_settings)
    for reason in ("signer role user may not run it (needs scheduler)",
                   "Refusing to deserialize untrusted content of type json", "signer role node"):
        refuse(app, queue="node.rmA.node1", signer="/CN=x", reason=reason)
    values = _scrape(server.url)
    refused = "grid_tasks_messages_refused_total"
    assert _value(values, refused, reason="role") == 2
    assert _value(values, refused, reason="unsigned") == 1
    assert _value(values, refused, reason="bad_signature") == 0

    for source in ("broker", "database", "registry", "redis"):
        assert _value(values, "grid_tasks_scrape_source_up", source=source) == 1
    q = "grid_tasks_queue_messages"
    assert _value(values, q, queue="gram.rmA", kind="gatekeeper", rm="rmA", node="") == 3
    assert _value(values, q, queue="node.rmB.node3", kind="node", rm="rmB", node="node3") == 2
    assert _value(values, q, queue="scheduler", kind="scheduler", rm="", node="") == 2
    assert _value(values, q, queue="gram.rmB", kind="gatekeeper", rm="rmB", node="") == 0
    assert _value(values, q, queue="iterate.rmB", kind="iterations", rm="rmB", node="") == 1
    assert _value(values, q, queue="iterate.rmA", kind="iterations", rm="rmA", node="") == 0

    assert _value(values, "grid_tasks_maui_jobs", rm="rmA", state="Running") == 2
    assert _value(values, "grid_tasks_maui_jobs", rm="rmA", state="Idle") == 1
    assert _value(values, "grid_tasks_maui_jobs", rm="rmB", state="Idle") == 3
    assert _value(values, "grid_tasks_maui_jobs", rm="rmB", state="Running") == 0
    assert _value(values, "grid_tasks_jobs", rm="rmB", state=JobState.DONE.value) == 1

    nodes = "grid_tasks_nodes"
    assert _value(values, nodes, rm="rmA", state="Down") == 1
    assert _value(values, nodes, rm="rmB", state="Unknown") == 2
    alive = sum(v for (n, labels), v in values.items()
                if n == nodes and ("rm", "rmA") in labels and ("state", "Down") not in labels)
    assert alive == 1  # node1: registered and heartbeating, in whichever live state

    hist = "grid_tasks_iteration_duration_seconds"
    assert _value(values, hist + "_count", rm="rmA") == 3
    assert _value(values, hist + "_sum", rm="rmA") == pytest.approx(1.76)
    assert _value(values, hist + "_bucket", rm="rmA", le="0.05") == 2
    assert _value(values, hist + "_bucket", rm="rmA", le="1.0") == 2
    assert _value(values, hist + "_bucket", rm="rmA", le="2.5") == 3
    assert _value(values, hist + "_bucket", rm="rmA", le="+Inf") == 3
    assert _value(values, "grid_tasks_iteration_last_seconds", rm="rmA") == pytest.approx(1.7)

    res = "grid_tasks_reservations"
    assert _value(values, res, rm="rmA", kind="admin", phase="active") == 1  # "gone" is over
    assert _value(values, res, rm="rmB", kind="job", phase="future") == 1
    assert _value(values, res, rm="rmB", kind="grid", phase="active") == 1
    assert _value(values, "grid_tasks_reservation_tokens", state="held") == 1
    assert _value(values, "grid_tasks_reservation_tokens", state="confirmed") == 1

    # The same endpoint follows the state: one queued message consumed, one more job.
    broker = redis.Redis.from_url(grid_settings.broker_url)
    broker.rpop("gram.rmA")
    _jobs(sessions, reservations=False)
    again = _scrape(server.url)
    assert _value(again, q, queue="gram.rmA", kind="gatekeeper", rm="rmA", node="") == 2
    assert _value(again, "grid_tasks_maui_jobs", rm="rmB", state="Idle") == 6
    broker.close(), client.close(), registry.client.close()


def test_a_source_down_is_reported_and_the_rest_still_answers(grid_settings, sessions):
    _jobs(sessions)
    dead = grid_settings.replace(redis_url="redis://127.0.0.1:1/3")
    srv = MetricsServer(dead, port=0).start()
    try:
        values = _scrape(srv.url)
    finally:
        srv.stop()
    assert _value(values, "grid_tasks_scrape_source_up", source="redis") == 0
    assert _value(values, "grid_tasks_scrape_source_up", source="registry") == 0
    assert _value(values, "grid_tasks_scrape_source_up", source="database") == 1
    assert _value(values, "grid_tasks_maui_jobs", rm="rmA", state="Running") == 2


def test_other_paths_and_a_busy_port(grid_settings, server):
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(server.url.replace("/metrics", "/nope"), timeout=5)
    assert err.value.code == 404
    with urllib.request.urlopen(server.url.replace("/metrics", "/"), timeout=5) as reply:
        assert b'href="/metrics"' in reply.read()
    port = int(server.url.rsplit(":", 1)[1].split("/")[0])
    with pytest.raises(ConnectivityError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
        MetricsServer(grid_settings, port=port)


def test_the_exporter_imports_without_celery():
    # `grid-tasks up` runs the exporter in its own process while eight workers start:
    # Celery's import there (over a second of CPU on a slow host) delayed them all.
    import subprocess

    code = ("import sys; import grid_tasks.metrics; "
            "print('celery' in sys.modules or 'kombu' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"
