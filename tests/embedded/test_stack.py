"""The embedded stack in-process: all nodes up, Flower behind basic auth, nothing left."""

from __future__ import annotations

import base64
import html
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from grid_tasks.client import Grid
from grid_tasks.embedded.flower_app import topology_queues
from grid_tasks.embedded.health import HealthError, check_beat, check_node, check_worker
from grid_tasks.embedded.stack import (EmbeddedStack, StackOptions, service_workers,
                                       stop_on_signals)
from grid_tasks.embedded.supervisor import ChildFailed
from grid_tasks.errors import ConfigError
from grid_tasks.ha.status import read_status
from grid_tasks.security.roles import Role
from grid_tasks.states import NodeState
from grid_tasks.topology import load_topology
from tests.conftest import DEMO_TOPOLOGY
from tests.metrics.flower_live import flower_shown_check, flower_stack, flower_task
from tests.waiting import until


def _get(url: str, auth: str | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url)
    if auth:
        req.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, b""
    except (urllib.error.URLError, ConnectionError):
        return 0, b""


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStack]:
    """One demo grid with Flower for this module's tests; after stop() none of its
    processes is left and its /metrics endpoint is gone."""
    seen: dict[str, str | None] = {}
    with flower_stack(tmp_path_factory.mktemp("stack") / "s") as stack:
        seen["metrics"] = stack.metrics_url
        yield stack
    assert seen["metrics"] and _get(seen["metrics"])[0] == 0
    assert stack.metrics_url is None


def test_stack_with_flower(running: EmbeddedStack) -> None:
    stack = running
    # start() saw every node alive; with a 0.9 s heartbeat TTL on a loaded two-core
    # machine (Flower importing) one beat may lapse for a moment, so wait briefly
    registry = stack.registry()
    until(lambda: [s.state for s in registry.list_nodes(stack.topology)]
          == [NodeState.IDLE] * 4, 10, "all four nodes Idle")
    assert stack.settings.redis_url.startswith("redis://:")  # password set
    user, password = stack.flower_auth.split(":", 1)
    assert user and len(password) >= 12, "a generated, non-trivial password"
    api = stack.flower_url + "api/"
    # start() returns only once Flower listens: the URL it printed answers at once
    assert _get(api + "workers?refresh=1")[0] == 401
    assert _get(api + "tasks")[0] == 401
    assert _get(api + "workers", f"{user}:wrong-{password}")[0] == 401
    # Flower's workers page lists a node daemon from its heartbeat events (a lean node
    # has no remote-control mailbox, so api/workers, built from inspect replies, does not).
    until(lambda: any(w.get("hostname", "").startswith("node1.rmA@") for w in json.loads(
        _get(stack.flower_url + "workers?json=1", stack.flower_auth)[1] or b"{}").get(
            "data", [])), 30, "Flower to list node1.rmA", poll=0.3)
    _flower_shows_readable_task_names(stack)
    _node_daemons_run_the_solo_pool(stack)


def _flower_shows_readable_task_names(stack: EmbeddedStack) -> None:
    info = flower_shown_check(stack, "rmA", "node1")
    assert info["name"] == "check node on rmA/node1"
    assert info["args"] == "(rm='rmA', node='node1')"
    assert info["worker"].startswith("node1.rmA@")


def _node_daemons_run_the_solo_pool(stack: EmbeddedStack) -> None:
    """Each role's pool as the running workers report it (``grid-tasks worker``'s default)."""
    from grid_tasks.celery_app import create_app

    # remote control is an operator's (or the scheduler's) right, not a user's
    operator = stack.settings.replace(signing=stack.signing_for(Role.OPERATOR))
    app, pools, deadline = create_app(operator), {}, time.monotonic() + 30
    try:  # a broadcast can go unanswered while a consumer is still starting: ask again
        while "gatekeeper-rmA" not in pools:
            assert time.monotonic() < deadline, pools
            stats = app.control.inspect(timeout=2).stats() or {}
            pools.update({name.split("@")[0]: info["pool"]["implementation"]
                          for name, info in stats.items()})
    finally:
        app.close()
    # a lean node daemon has no remote-control mailbox: its pool is on its command line
    import psutil

    nodes = [psutil.Process(c.pid).cmdline() for c in stack.supervisor.children
             if c.name.startswith("node-")]
    # (no -P given: the default of a node daemon's role, solo)
    from grid_tasks.cli.worker import default_pool

    assert len(nodes) >= 2 and default_pool("rmA", "node1") == "solo"
    assert all("--node" in argv and "-P" not in argv and "--pool" not in argv for argv in nodes)
    assert pools["gatekeeper-rmA"].endswith("thread:TaskPool"), pools


def test_crashing_daemon_fails_start_and_cleans_up(tmp_path):
    # A daemon that dies at start must end start() at once with its log, not a timeout.
    stack = EmbeddedStack(StackOptions(topology_file=DEMO_TOPOLOGY, state_dir=tmp_path / "s",
                                       start_timeout=20))
    stack._spawn_workers = lambda: stack.supervisor.spawn(  # type: ignore[method-assign]
        "broken", [sys.executable, "-c", "raise SystemExit('no luck')"])
    started = time.monotonic()
    with pytest.raises(ChildFailed, match="broken exited with code 1: no luck"):
        stack.start()
    assert time.monotonic() - started < 10
    assert stack.supervisor.children == []
    assert stack.redis.process is None


def test_bad_topology_is_refused_before_anything_starts(tmp_path):
    bad = tmp_path / "grid.toml"
    bad.write_text("[rm.a.node.n]\nprocs = 0\n")
    with pytest.raises(ConfigError, match="procs must be at least 1"):
        EmbeddedStack(StackOptions(topology_file=bad, state_dir=tmp_path / "s"))


def test_stack_runs_ha_beats_and_serves_metrics(running: EmbeddedStack) -> None:
    """`grid-tasks up`: no beat embedded in the scheduler worker, two HA beats (one leads),
    the /metrics endpoint up while the stack runs (gone after stop(): the fixture)."""
    stack = running
    children = {c.name: c for c in stack.supervisor.children}
    assert {"beat-a", "beat-b"} <= set(children)
    assert "--beat" not in children["scheduler"].process.args
    code, body = _get(stack.metrics_url)
    assert code == 200 and b"grid_tasks_" in body
    client = redis.Redis.from_url(stack.settings.redis_url)
    try:  # one of the two takes the lease
        until(lambda: read_status(client).leader is not None, 30, "a beat to lead", poll=0.2)
    finally:
        client.close()


@pytest.mark.parametrize("first", [signal.SIGINT, signal.SIGTERM])
def test_the_first_stop_signal_interrupts_and_the_next_ones_wait_for_the_stop(first):
    """`up`/`demo`: the first signal raises KeyboardInterrupt; a second one arriving
    before the stop has begun is ignored instead of cutting the stop short."""
    before = signal.getsignal(signal.SIGINT)
    with stop_on_signals():
        with pytest.raises(KeyboardInterrupt, match=first.name):
            os.kill(os.getpid(), first)
            time.sleep(1)  # the handler runs here
        for again in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            os.kill(os.getpid(), again)  # would raise (or end pytest) if not ignored
        time.sleep(0.05)
    assert signal.getsignal(signal.SIGINT) is before


def test_a_running_job_is_a_task_in_flower_until_it_ends(running: EmbeddedStack,
                                                         tmp_path) -> None:
    """Operators watch Flower: a job shows there, STARTED under its node's worker, for
    as long as it runs (its launch task ends at once); its end is the task's result."""
    stack = running
    grid = Grid(stack.settings)
    try:
        job = grid.submit("&(executable=/bin/sleep)(arguments=120)", "rmA")
        named = rf"job {job.id}( \(\w+\))? on rmA/node[12]"
        shown = flower_task(stack, named, "STARTED")
        assert re.fullmatch(r"node[12]\.rmA@.+", shown["worker"]), shown
        assert "executable='/bin/sleep'" in shown["args"]
        _flower_screenshot_shows(stack, shown["name"], tmp_path)
        grid.cancel(job.id)
        ended = flower_task(stack, named, "SUCCESS")  # cancelled: the user's outcome
    finally:
        grid.close()
    assert ended["uuid"] == shown["uuid"]
    assert "USER_CANCELLED" in ended["result"], ended


def _flower_screenshot_shows(stack: EmbeddedStack, name: str, tmp_path) -> None:
    """Flower's task list in headless Chromium: the running job's name in the page,
    and a screenshot of it that is not blank (saved in ``tmp_path``)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("no chromium here (Debian: apt-get install chromium)")
    url = stack.flower_url.replace("://", f"://{stack.flower_auth}@", 1) + "tasks"
    shot = tmp_path / "flower-tasks.png"
    common = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
              f"--user-data-dir={tmp_path / 'chromium'}", "--virtual-time-budget=8000"]
    dom = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert name in html.unescape(dom), dom[-2000:]
    subprocess.run([*common, f"--screenshot={shot}", "--window-size=1400,900", url],
                   capture_output=True, timeout=60, check=True)
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000, len(png)


def test_flowers_broker_page_lists_every_queue_from_the_start(running: EmbeddedStack) -> None:
    """Flower asks workers for their queues once, at its start, while they are still
    starting: the page listed `scheduler` alone until a refresh.  Flower's app declares
    the topology's queues."""
    queues = topology_queues(running.topology)
    assert len(queues) == 9 and "node.rmB.node4" in queues and "gram.rmA" in queues
    assert "iterate.rmA" in queues and "iterate.rmB" in queues
    code, page = _get(running.flower_url + "broker", running.flower_auth)
    assert code == 200
    listed = re.findall(rb'<tr id="([^"]+)">', page)
    assert sorted(q.decode() for q in listed) == sorted(queues)


def test_the_containers_healthchecks_tell_working_processes_from_missing_ones(
        running: EmbeddedStack) -> None:
    """compose.yaml's healthchecks (grid_tasks.embedded.health) against a live grid: a
    worker answering a ping, a node heartbeating, a beat reporting, Flower's and the
    metrics' HTTP; and what is not there is unhealthy, with the reason."""
    settings = running.settings
    assert check_worker(settings, "scheduler").startswith("scheduler@")
    assert check_worker(settings, "gatekeeper-rmB").startswith("gatekeeper-rmB@")
    assert check_node(settings, "rmB", "node4").startswith("node rmB/node4 is ")
    beat = "beat-a"
    until(lambda: _healthy(lambda: check_beat(settings, beat, time.time())), 20, "beat-a")
    with pytest.raises(HealthError, match="did not answer a ping within 1 s"):
        check_worker(settings, "nosuch", timeout=1)
    with pytest.raises(HealthError, match="node rmA/node9 is Unknown"):
        check_node(settings, "rmA", "node9")
    with pytest.raises(HealthError, match="beat beat-z never reported itself"):
        check_beat(settings, "beat-z", time.time())
    with pytest.raises(HealthError, match="last reported"):
        check_beat(settings, beat, time.time() + 3600)
    # as compose runs it: a process, its exit code; Flower's /healthcheck needs no login
    probe = [sys.executable, "-m", "grid_tasks.embedded.health", "http"]
    assert subprocess.run([*probe, running.flower_url + "healthcheck"],
                          capture_output=True, timeout=30).returncode == 0
    gone = subprocess.run([*probe, "http://127.0.0.1:1/metrics"], capture_output=True,
                          text=True, timeout=30)
    assert gone.returncode == 1 and gone.stderr.startswith("unhealthy: http://127.0.0.1:1")


def _healthy(probe: Any) -> bool:
    try:
        probe()
    except HealthError:
        return False
    return True


def test_up_runs_an_iteration_worker_for_each_rm_marked_own(tmp_path) -> None:
    from tests.test_scheduler_queues import own_topology

    def roles(path):
        return {name: args for name, args in service_workers(load_topology(path), "INFO")}

    plain = roles(DEMO_TOPOLOGY)
    assert sorted(plain) == ["gatekeeper-rmA", "gatekeeper-rmB", "scheduler", "scheduler-2"]
    own = roles(own_topology(tmp_path, "rmB"))
    assert own["iterations-rmB"][:3] == ["worker", "--iterations", "rmB"]
    assert set(own) - set(plain) == {"iterations-rmB"}
