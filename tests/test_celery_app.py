"""The Celery app: queue names, routes, reliability settings, readable task names."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import redis

from grid_tasks.celery_app import (
    HOUSEKEEPING_TASKS, LAUNCH_CRITICAL, SCHEDULER_QUEUE, QueueNameError, celery_config, check_connectivity, create_app,
    NODE_TASK_MODULES, gatekeeper_queue, node_queue, readable, task_modules,
)
from grid_tasks.effects import ITERATE
from grid_tasks.errors import ConnectivityError, GridTasksError
from grid_tasks.node.tasks import NODE_CHECK, check_options
from grid_tasks.scheduling.tasks import PING, WATCH_NODES
from grid_tasks.settings import Settings
from tests.metrics.flower_live import TaskEvents
from tests.waiting import until


def test_queue_names():
    assert gatekeeper_queue("rmA") == "gram.rmA"
    assert node_queue("rmA", "node1") == "node.rmA.node1"
    assert SCHEDULER_QUEUE == "scheduler"


@pytest.mark.parametrize("rm, node", [("rm.A", "n"), ("rmA", "no de"), ("", "n"), ("rmA", "")])
def test_bad_names_are_typed_errors(rm, node):
    with pytest.raises(QueueNameError) as info:
        node_queue(rm, node)
    assert isinstance(info.value, GridTasksError)


def _route(app, name, **kwargs):
    return app.amqp.router.route({}, name, args=(), kwargs=kwargs)["queue"].name


def test_routes(celery_app_factory):
    app = celery_app_factory()
    assert _route(app, NODE_CHECK, rm="rmB", node="node3") == "node.rmB.node3"
    assert _route(app, "grid_tasks.gram.gatekeeper.submit", rm="rmA", job=1) == "gram.rmA"
    assert _route(app, "grid_tasks.gram.tasks.launch", rm="rmA", node="node2",
                  on_node=True) == "node.rmA.node2"
    for name in ("celery.accumulate", "celery.chord_unlock", "grid_tasks.maui.tasks.iterate",
                 "grid_tasks.duroc.tasks.release", "some.other.task"):
        assert _route(app, name) == SCHEDULER_QUEUE


def test_config_is_signed_with_json_results_and_restores_lost_tasks_within_a_minute():
    s = Settings.from_env({"GRID_TASKS_VISIBILITY_TIMEOUT": "30"})
    conf = celery_config(s)
    assert conf["accept_content"] == ["auth"] and conf["result_accept_content"] == ["json"]
    assert conf["task_serializer"] == "auth" and conf["result_serializer"] == "json"
    t = conf["broker_transport_options"]
    worst = t["visibility_timeout"] + t["unacked_restore_interval"] * t["unacked_restore_throttle"]
    assert worst <= 60
    assert LAUNCH_CRITICAL == {"acks_late": True, "reject_on_worker_lost": True}


def test_redis_broker_sockets_time_out_but_outlast_a_brpop():
    redis_conf = celery_config(Settings.from_env({}))["broker_transport_options"]
    assert 1 < redis_conf["socket_timeout"] <= 30  # kombu's BRPOP waits 1 s server-side
    assert redis_conf["socket_connect_timeout"] > 0 and redis_conf["socket_keepalive"]
    amqp = Settings.from_env({"GRID_TASKS_BROKER_URL": "amqp://guest:guest@127.0.0.1//"})
    assert "socket_timeout" not in celery_config(amqp)["broker_transport_options"]


def test_a_redis_queue_is_one_list_whatever_priority_a_sender_gives(celery_app_factory,
                                                                   settings):
    """Every BRPOP names each queue once (not at four priority steps), and a message
    sent with a priority still lands in the one list it reads."""
    app = celery_app_factory()
    with app.connection_for_write() as conn:
        assert conn.default_channel.priority_steps == [0]
        app.send_task("grid_tasks.probe", queue="probe-q", priority=9, connection=conn)
        app.send_task("grid_tasks.probe", queue="probe-q", connection=conn)
        assert conn.default_channel._get("probe-q") is not None  # the plain list
    broker = redis.Redis.from_url(settings.broker_url)
    try:
        assert broker.keys("probe-q*") == [b"probe-q"]
        assert broker.llen("probe-q") == 1
    finally:
        broker.close()


def test_task_names_are_namespaced_by_module(celery_app_factory):
    app = celery_app_factory()
    app.loader.import_default_modules()
    assert "grid_tasks.node.tasks" in task_modules()
    ours = [name for name in app.tasks if not name.startswith("celery.")]
    assert NODE_CHECK in ours
    for name in ours:
        module = name.rsplit(".", 1)[0]
        assert app.tasks[name].__module__ == module


def test_readable_names_for_flower():
    opts = readable("launch", job=42, rm="rmA", node="node1")
    assert opts["shadow"] == "launch job 42 on rmA/node1"
    assert opts["argsrepr"] == "(job=42, rm='rmA', node='node1')"
    assert readable("iterate", rm="rmB")["shadow"] == "iterate on rmB"
    assert check_options("rmB", "node4")["shadow"] == "check node on rmB/node4"


def test_node_check_runs_on_that_nodes_queue(settings, celery_app_factory, in_process_worker):
    worker_app = celery_app_factory(node=("rmA", "node2"))
    in_process_worker(worker_app, queues=[node_queue("rmA", "node2")])
    client = celery_app_factory()
    result = client.send_task(NODE_CHECK, **check_options("rmA", "node2")).get(timeout=20)
    assert result["queue"] == "node.rmA.node2"
    assert result["served_by"]["node"] == "node2" and result["served_by"]["rm"] == "rmA"
    assert result["configured"]["procs"] == 4  # from config/demo-grid.toml
    assert result["detected"]["procs"] >= 1 and result["detected"]["memory_mb"] > 0
    assert result["facts"]["pid"] == os.getpid()  # in-process worker


def test_unreachable_services_are_one_line_errors(settings):
    dead = settings.replace(broker_url="redis://127.0.0.1:1/1")
    with pytest.raises(ConnectivityError, match="cannot reach the broker") as info:
        check_connectivity(dead, timeout=1)
    assert "\n" not in str(info.value)
    with pytest.raises(ConnectivityError, match="cannot reach Redis"):
        check_connectivity(settings.replace(redis_url="redis://127.0.0.1:1/3"), timeout=1)
    wrong_password = settings.redis_url.replace("@", "x@", 1)
    with pytest.raises(ConnectivityError):
        check_connectivity(settings.replace(broker_url=wrong_password), timeout=1)


@pytest.mark.amqp
def test_rabbitmq_broker_runs_node_check(settings, celery_app_factory, in_process_worker):
    url = os.environ.get("GRID_TASKS_TEST_AMQP_URL")
    if not url:
        pytest.skip("GRID_TASKS_TEST_AMQP_URL not set")
    amqp = settings.replace(broker_url=url)
    try:
        check_connectivity(amqp, timeout=2)
    except ConnectivityError as exc:
        pytest.skip(f"RabbitMQ not reachable: {exc}")
    worker_app = celery_app_factory(amqp, node=("rmB", "node4"))
    worker_app.conf.broker_heartbeat = 0  # its 10 s timer would be the shutdown poll bound
    in_process_worker(worker_app, queues=[node_queue("rmB", "node4")], pool="solo")
    client = celery_app_factory(amqp)
    result = client.send_task(NODE_CHECK, **check_options("rmB", "node4")).get(timeout=20)
    assert result["queue"] == "node.rmB.node4"
    assert result["served_by"]["node"] == "node4"


def test_beat_gets_one_entry_per_rm_for_each_periodic_task(settings, celery_app_factory,
                                                           monkeypatch, tmp_path):
    from celery.beat import Service

    from grid_tasks import celery_app as mod

    monkeypatch.setattr(mod, "PERIODIC", {})
    with pytest.raises(GridTasksError):
        mod.register_periodic("grid_tasks.maui.tasks.iterate", every=0)
    mod.register_periodic("grid_tasks.maui.tasks.iterate", every=30)
    app = celery_app_factory()
    service = Service(app, schedule_filename=str(tmp_path / "beat-schedule"))
    try:
        mod._install_beat_schedule(sender=service)
        schedule = service.scheduler.schedule
        ours = {k: v for k, v in schedule.items() if k.startswith("grid_tasks.")}
        assert set(ours) == {"grid_tasks.maui.tasks.iterate[rmA]",
                             "grid_tasks.maui.tasks.iterate[rmB]"}
        entry = ours["grid_tasks.maui.tasks.iterate[rmB]"]
        assert entry.kwargs == {"rm": "rmB"}
        assert entry.options["shadow"] == "iterate on rmB"
        assert entry.schedule.run_every.total_seconds() == 30
    finally:
        service.stop()


def test_factory_apps_are_current_so_shared_tasks_use_the_private_broker(settings,
                                                                          celery_app_factory):
    from grid_tasks.node.tasks import node_check

    app = celery_app_factory()
    assert node_check.app is app  # the shared_task proxy resolves to the current app
    assert app.conf.broker_url == settings.broker_url


def test_a_node_daemon_imports_no_database_layer():
    # A node daemon holds no database credentials: its task modules (all it imports at
    # start) never load SQLAlchemy or alembic, and it starts without them.
    code = ("import importlib, sys; import grid_tasks.celery_app as c; "
            "[importlib.import_module(m) for m in c.task_modules(node_only=True)]; "
            "print(sorted(m for m in ('sqlalchemy', 'alembic') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def test_a_node_daemon_includes_only_the_node_task_modules(settings, monkeypatch):
    monkeypatch.setenv("GRID_TASKS_RM", "rmA")
    monkeypatch.setenv("GRID_TASKS_NODE", "node1")
    node_app = create_app(settings)
    monkeypatch.delenv("GRID_TASKS_NODE")
    service_app = create_app(settings)
    try:
        assert set(node_app.conf.include) == set(NODE_TASK_MODULES)
        assert "grid_tasks.gram.gatekeeper" in service_app.conf.include
        assert set(service_app.conf.include) >= set(NODE_TASK_MODULES)
    finally:
        node_app.close()
        service_app.close()


def test_task_sent_events_carry_the_readable_name(settings):
    # Flower keeps the name of whichever event it gets last; the client's task-sent
    # event must not bring back the plain task name over the worker's readable one.
    app = create_app(settings)
    try:
        options = check_options("rmA", "node1")
        message = app.amqp.create_task_message(
            "id-1", NODE_CHECK, (), options.get("kwargs"), create_sent_event=True,
            shadow=options["shadow"], argsrepr=options.get("argsrepr"))
        assert message.headers["task"] == NODE_CHECK  # routing still by the real name
        assert message.sent_event["name"] == "check node on rmA/node1"
        plain = app.amqp.create_task_message("id-2", NODE_CHECK, (), {},
                                             create_sent_event=True)
        assert plain.sent_event["name"] == NODE_CHECK  # no shadow: the name itself
    finally:
        app.close()


def test_housekeeping_sends_no_task_event_unless_it_fails(settings, celery_app_factory,
                                                         in_process_worker):
    # Beat's iterations and node watches (69 a minute on an idle demo grid)
    # buried the users' tasks in Flower: they send no event, not even task-sent, but a
    # failing one is shown, by its name.
    worker_app = celery_app_factory()
    in_process_worker(worker_app, queues=[SCHEDULER_QUEUE], concurrency=1)  # in order
    client = celery_app_factory()
    assert {t for t in HOUSEKEEPING_TASKS if client.tasks[t].send_events is False} \
        == HOUSEKEEPING_TASKS == {ITERATE, WATCH_NODES}
    assert client.tasks[PING].send_events is True
    with TaskEvents(client) as seen:
        quiet = client.send_task(WATCH_NODES, kwargs={"rm": "rmA"},
                                 **readable("watch nodes", rm="rmA"))
        loud = client.send_task(PING, **readable("ping"))
        assert loud.get(timeout=20) == "pong"  # the watch ran before it
        failing = client.send_task(WATCH_NODES, kwargs={"rm": "rmA", "bogus": 1},
                                   **readable("watch nodes", rm="rmA"))
        until(lambda: "task-failed" in seen.of(failing.id), 20, "the failure's event")
        until(lambda: "task-succeeded" in seen.of(loud.id), 20, "the ping's events")
    assert seen.of(quiet.id) == []
    assert seen.of(loud.id)[:1] == ["task-sent"]
    assert seen.of(failing.id) == ["task-received", "task-failed"]
    assert seen.names()[failing.id] == "watch nodes on rmA"
