"""A lean node daemon (issue 25): at most three Redis connections, and still a node.

A real ``grid-tasks worker --rm rmA --node node1`` with signing on is counted in
``CLIENT LIST`` of the private redis-server - by the client name it gives every
connection and, to catch an unnamed one, by its own sockets' ports - while it
registers, heartbeats, runs a scheduler-signed launch, has it cancelled, answers a
node check (its result stored), runs another launch and is SIGKILLed.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import time
from pathlib import Path

import psutil
import pytest
import redis

from grid_tasks.faults.harness import until
from grid_tasks.gram import keys as gram_keys
from grid_tasks.gram.launch import LaunchRequest
from grid_tasks.gram.tasks import LAUNCH
from grid_tasks.node.registry import NodeRegistry
from grid_tasks.node.tasks import NODE_CHECK, check_options
from grid_tasks.node.worker_config import client_name
from grid_tasks.security.role_keys import ensure_grid_keys
from grid_tasks.security.roles import Role
from grid_tasks.selftest.forge import push, sealed, task_body
from grid_tasks.states import NodeState

MAX_CONNECTIONS = 3
NAME = client_name("rmA", "node1")


def _clients(admin: redis.Redis, pid: int, port: int) -> tuple[set[int], set[int]]:
    """(ids of the connections from ``pid``'s sockets, ids of those named :data:`NAME`),
    from listings that agree (a connection opening or closing in between: look again)."""
    for _ in range(50):
        ports = {c.laddr.port for c in psutil.Process(pid).net_connections("tcp")
                 if c.raddr and c.raddr.port == port}
        listed = admin.client_list()
        if ports == {c.laddr.port for c in psutil.Process(pid).net_connections("tcp")
                     if c.raddr and c.raddr.port == port}:
            mine = {int(c["id"]) for c in listed if int(c["addr"].rsplit(":", 1)[1]) in ports}
            return mine, {int(c["id"]) for c in listed if c["name"] == NAME}
        time.sleep(0.05)
    raise AssertionError("the daemon's sockets never held still")


def _assert_lean(admin: redis.Redis, pid: int, port: int, when: str) -> None:
    mine, named = _clients(admin, pid, port)
    assert mine == named, f"{when}: unnamed connections {mine - named}, foreign {named - mine}"
    assert 1 <= len(mine) <= MAX_CONNECTIONS, f"{when}: {len(mine)} Redis connections"


def _launch(settings, keys, job_id: int, pidfile: Path) -> None:
    """A scheduler-signed launch of a shell that writes its pid and sleeps."""
    token = f"tok{job_id}"
    store = redis.Redis.from_url(settings.redis_url)
    try:
        store.set(gram_keys.token_key(job_id), token)
    finally:
        store.close()
    req = LaunchRequest(job_id=job_id, rm="rmA", node="node1", token=token,
                        executable="/bin/sh", arguments=["-c", f"echo $$ > {pidfile}; "
                                                               "exec sleep 60"],
                        tasks=1, rank_offset=0, size=1, nodes=1, job_type="single")
    body = task_body(LAUNCH, {"rm": "rmA", "node": "node1", "on_node": True,
                              "request": req.to_dict()})
    push(settings.broker_url, "node.rmA.node1", LAUNCH,
         sealed(keys.for_role(Role.SCHEDULER), body), signed=True)


def _running(pidfile: Path, daemon) -> int:
    try:
        text = until(lambda: pidfile.exists() and pidfile.read_text().strip(), 30,
                     f"the launch to write {pidfile.name}")
    except Exception as exc:  # FaultTimeout: say what the daemon logged
        raise AssertionError(f"{exc}:\n{daemon.log_tail(30)}") from None
    return int(text)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_node_daemon_holds_at_most_three_redis_connections(
        settings, redis_server, node_worker, celery_app_factory, tmp_path):
    keys = ensure_grid_keys(tmp_path / "keys", "alice", now=dt.datetime.now(dt.timezone.utc))
    daemon = node_worker("rmA", "node1", **settings.replace(signing=keys.signing(Role.NODE))
                         .to_env())
    admin = redis.Redis.from_url(redis_server.url(0))
    registry = NodeRegistry.from_url(settings.redis_url, settings.heartbeat_ttl)
    port = redis_server.port
    try:
        first = registry.status("rmA", "node1").last_heartbeat
        until(lambda: registry.status("rmA", "node1").last_heartbeat != first, 10,
              "a second heartbeat")
        _assert_lean(admin, daemon.pid, port, "idle")

        _launch(settings, keys, 501, tmp_path / "a.pid")
        job = _running(tmp_path / "a.pid", daemon)
        _assert_lean(admin, daemon.pid, port, "running a job")
        store = redis.Redis.from_url(settings.redis_url)
        store.set(gram_keys.cancel_key(501), 1)  # what a cancel writes
        store.close()
        until(lambda: _gone(job), 15, "the cancelled job's process to end")

        client = celery_app_factory(settings.replace(signing=keys.signing(Role.SCHEDULER)))
        answer = client.send_task(NODE_CHECK, **check_options("rmA", "node1")).get(timeout=30)
        assert answer["served_by"]["node"] == "node1"
        _assert_lean(admin, daemon.pid, port, "after storing a result")

        _launch(settings, keys, 502, tmp_path / "b.pid")
        job = _running(tmp_path / "b.pid", daemon)
        os.kill(daemon.pid, signal.SIGKILL)  # its watchdog kills the job it leaves
        until(lambda: _gone(job), 15, "the killed daemon's job to end")
        until(lambda: registry.status("rmA", "node1").state is NodeState.UNKNOWN, 10,
              "node1 to turn Unknown")
        until(lambda: not [c for c in admin.client_list() if c["name"] == NAME], 10,
              "the killed daemon's connections to close")
    finally:
        admin.close()
        registry.client.close()


@pytest.mark.slow
def test_without_lean_nodes_a_daemon_holds_more(redis_server, node_worker):
    """The control: Celery's defaults (``GRID_TASKS_LEAN_NODES=0``) hold more than three
    and name none - what the test above would catch if the lean settings were lost."""
    daemon = node_worker("rmA", "node1", GRID_TASKS_LEAN_NODES="0")
    admin = redis.Redis.from_url(redis_server.url(0))
    try:
        mine, named = until(lambda: (lambda c: c if len(c[0]) > MAX_CONNECTIONS else None)(
            _clients(admin, daemon.pid, redis_server.port)), 20, "the pidbox and producers")
        assert not named and len(mine) > MAX_CONNECTIONS
    finally:
        admin.close()
