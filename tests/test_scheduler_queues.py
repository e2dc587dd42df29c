"""Per-RM iteration queues: every sender routes an RM's iterations to ``iterate.<rm>``,
shared scheduler workers consume those of the RMs not marked ``own`` (and of RMs added
to the topology later), and an RM marked ``own`` is served by its own process."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import redis

from grid_tasks.effects import ITERATE, send_iteration, trigger_iteration
from grid_tasks.embedded.supervisor import Supervisor, leftover
from grid_tasks.queues import SCHEDULER_QUEUE, iteration_queue
from grid_tasks.scheduler_queues import TopologyWatch, follow_topology, shared_iteration_queues
from grid_tasks.scheduling.tasks import WATCH_NODES, _per_rm_schedule
from grid_tasks.topology import load_topology
from tests.conftest import CONFIG_DIR, DEMO_TOPOLOGY, REPO_ROOT
from tests.waiting import until


def own_topology(tmp_path: Path, *own: str) -> Path:
    """The demo grid with ``own`` RMs marked ``scheduler = "own"``."""
    text = DEMO_TOPOLOGY.read_text().replace('"demo.cfg"', f'"{CONFIG_DIR / "demo.cfg"}"')
    for rm in own:
        text = text.replace(f"[rm.{rm}]\n", f'[rm.{rm}]\nscheduler = "own"\n')
    path = tmp_path / "grid.toml"
    path.write_text(text)
    return path


def _lengths(settings, *queues: str) -> list[int]:
    client = redis.Redis.from_url(settings.broker_url)
    try:
        return [client.llen(q) for q in queues]
    finally:
        client.close()


def test_every_sender_routes_an_rms_iterations_to_its_own_queue(settings, celery_app_factory):
    app = celery_app_factory()
    client = redis.Redis.from_url(settings.redis_url)
    assert trigger_iteration(app, "rmA", client=client)  # an event's trigger
    send_iteration(app, "rmB", why="lock watch", countdown=30)  # the runner's watches
    client.close()
    entries: dict = {}  # beat's per-RM entries, sent as beat sends them
    _per_rm_schedule(SimpleNamespace(app=app, scheduler=SimpleNamespace(
        update_from_dict=entries.update)))
    for key in (f"{ITERATE}[rmA]", f"{WATCH_NODES}[rmB]"):
        entry = entries[key]
        assert "queue" not in entry["options"]  # the router decides, for every sender
        app.send_task(entry["task"], kwargs=entry["kwargs"], **entry["options"])
    assert _lengths(settings, iteration_queue("rmA"), iteration_queue("rmB"),
                    SCHEDULER_QUEUE) == [2, 2, 0]


def test_shared_workers_serve_every_rm_not_marked_own(tmp_path):
    topology = load_topology(own_topology(tmp_path, "rmA"))
    assert shared_iteration_queues(topology) == ["iterate.rmB"]
    assert shared_iteration_queues(load_topology(DEMO_TOPOLOGY)) == ["iterate.rmA",
                                                                      "iterate.rmB"]


class _Consumer:
    """The two calls :func:`follow_topology` makes of Celery's consumer."""

    def __init__(self, consuming: set[str]) -> None:
        self.consuming = consuming
        self.task_consumer = SimpleNamespace(consuming_from=consuming.__contains__)

    def add_task_queue(self, name: str) -> None:
        self.consuming.add(name)


def test_an_rm_added_to_the_topology_is_served_without_a_restart(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text('[rm.a]\n[rm.a.node.n1]\nprocs = 1\n')
    watch = TopologyWatch(path)
    consumer = _Consumer({SCHEDULER_QUEUE, "iterate.a"})
    assert follow_topology(consumer, watch) == []  # first look: what it serves already
    assert follow_topology(consumer, watch) == []  # unchanged: not even parsed again
    time.sleep(0.01)
    path.write_text('[rm.a]\nscheduler = "own"\n[rm.a.node.n1]\nprocs = 1\n'
                    '[rm.b]\n[rm.b.node.n2]\nprocs = 1\n')
    assert follow_topology(consumer, watch) == ["iterate.b"]
    # rmA turned own: still served here (its own worker may not run yet), never dropped
    assert consumer.consuming == {SCHEDULER_QUEUE, "iterate.a", "iterate.b"}
    time.sleep(0.01)
    path.write_text("[rm.broken")  # unreadable: logged, nothing changes
    assert follow_topology(consumer, watch) == []


def test_an_rm_marked_own_is_iterated_by_its_own_process(settings, grid_env,
                                                          grid_tasks_command,
                                                          celery_app_factory, tmp_path):
    from grid_tasks.embedded.database import prepare_database

    topology = own_topology(tmp_path, "rmA")
    mine = settings.replace(topology_file=topology)
    prepare_database(mine, load_topology(topology))
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {**grid_env, **mine.to_env(), "PYTHONPATH": str(REPO_ROOT),
           "ITERATION_MARKS_DIR": str(marks)}
    sup = Supervisor(tmp_path / "logs")
    tail = ["--no-check", "-l", "WARNING", "--", "-I", "tests.iteration_marks"]
    try:
        own = sup.spawn("own", [*grid_tasks_command, "worker", "--iterations", "rmA",
                                "--no-check", "-l", "INFO", "--", "-I", "tests.iteration_marks"],
                        env=env)
        shared = sup.spawn("shared", [*grid_tasks_command, "worker", "--scheduler", *tail],
                           env=env)
        app = celery_app_factory(mine)
        for rm in ("rmA", "rmB", "rmA"):
            send_iteration(app, rm, why="test")

        def ran() -> dict[str, set[int]]:
            found: dict[str, set[int]] = {}
            for mark in marks.iterdir():
                rm, pid, _ = mark.name.split(".", 2)
                found.setdefault(rm, set()).add(int(pid))
            return found if {"rmA", "rmB"} <= set(found) else {}

        found = until(ran, 60, f"both RMs' iterations:\n{own.log_tail(10)}\n"
                               f"{shared.log_tail(10)}")
        assert found == {"rmA": {own.pid}, "rmB": {shared.pid}}
        # rmA's queue was loaded before the worker took its first task (warm_start)
        assert "warm start: rmA" in own.log_path.read_text(errors="replace")
    finally:
        pids = sup.all_pids()
        sup.stop_all(timeout=10)
        assert leftover(pids) == []
