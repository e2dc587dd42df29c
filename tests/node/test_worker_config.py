"""A node daemon's Celery settings come from one place and only node daemons get them."""

from __future__ import annotations

from grid_tasks.celery_app import celery_config, create_app
from grid_tasks.cli.worker import worker_argv
from grid_tasks.node.transport import TRANSPORT_PATH
from grid_tasks.node.worker_config import (HEARTBEAT_EVENT_S, LEAN_FLAG, NO_RESTORE_SCAN,
                                           node_worker_config)


def test_node_settings_turn_off_what_an_idle_node_need_not_pay_for(settings):
    base = celery_config(settings)
    conf = node_worker_config(base, "rmA", "node1")
    assert conf["worker_enable_remote_control"] is False
    assert conf["broker_transport"] == TRANSPORT_PATH
    assert conf["result_backend"].endswith("+" + settings.result_backend)
    transport = conf["broker_transport_options"]
    assert transport["unacked_restore_throttle"] == NO_RESTORE_SCAN
    assert transport["client_name"] == conf["redis_client_name"] == "node.rmA.node1"
    # what every worker must agree on stays as the grid's
    assert transport["visibility_timeout"] == base["broker_transport_options"][
        "visibility_timeout"]
    assert base["broker_transport_options"]["unacked_restore_throttle"] == 1  # base untouched


def test_only_a_node_daemon_app_is_lean_and_lean_nodes_0_turns_it_off(settings, monkeypatch):
    monkeypatch.setenv("GRID_TASKS_RM", "rmA")
    monkeypatch.setenv("GRID_TASKS_NODE", "node1")
    node = create_app(settings)
    plain = create_app(settings.replace(lean_nodes=False))
    monkeypatch.delenv("GRID_TASKS_NODE")
    gatekeeper = create_app(settings)
    try:
        assert node.conf.get(LEAN_FLAG) and not node.conf.worker_enable_remote_control
        for app in (plain, gatekeeper):
            assert not app.conf.get(LEAN_FLAG) and app.conf.worker_enable_remote_control
            assert app.conf.broker_transport_options["unacked_restore_throttle"] == 1
    finally:
        for app in (node, plain, gatekeeper):
            app.close()


def test_node_workers_send_heartbeat_events_every_30_s(settings):
    def argv(rm, node, s=settings):
        return worker_argv(rm=rm, node=node, scheduler=False, gatekeepers=False, beat=False,
                           settings=s, pool=None, concurrency=None, loglevel="INFO")

    node = argv("rmA", "node1")
    assert node[node.index("--heartbeat-interval") + 1] == f"{HEARTBEAT_EVENT_S:g}"
    assert "--heartbeat-interval" not in argv("rmA", None)  # a gatekeeper: Celery's 2 s
    assert "--heartbeat-interval" not in argv("rmA", "node1",
                                              settings.replace(lean_nodes=False))
