"""Worker heaps frozen out of full garbage collections (grid_tasks.node.heap)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from grid_tasks.embedded.stack import grid_tasks_command
from grid_tasks.embedded.supervisor import Supervisor, leftover
from grid_tasks.node.registry import NodeRegistry
from grid_tasks.settings import Settings

# Run in a fresh interpreter: freezing pytest's own heap would keep every test's
# objects alive for good.
PROGRAM = """
import gc, sys, types
from celery.signals import task_postrun
from grid_tasks.celery_app import create_app
from grid_tasks.node import heap

app = create_app()
heap.install(app)
assert heap.FrozenHeapStep in app.steps["worker"]
task_postrun.send(sender=None)  # not a worker that froze: nothing happens
assert gc.get_freeze_count() == 0 and heap._state["tasks"] == -1

heap.FrozenHeapStep(types.SimpleNamespace()).start(None)
first = gc.get_freeze_count()
assert first > 20000, first
assert all(name in sys.modules for name in heap.PRELOAD)
assert gc.collect() == 0  # nothing left for a full pass but what tasks make

kept = [[i] for i in range(5000)]  # what the first tasks build and keep (caches)
for _ in range(heap.REFREEZE_AFTER_TASKS):
    task_postrun.send(sender=None)
assert gc.get_freeze_count() == first  # not yet
task_postrun.send(sender=None)
second = gc.get_freeze_count()
assert second >= first + 5000, (first, second)
for _ in range(200):
    task_postrun.send(sender=None)
assert gc.get_freeze_count() == second  # twice in all

class Cycle:
    pass

garbage = Cycle()
garbage.me = garbage
del garbage
assert gc.collect() >= 1  # garbage made after the freezes is still collected
print("ok", first, second)
"""


def test_a_worker_freezes_its_heap_at_start_and_once_more_after_its_first_tasks() -> None:
    # the heap is the point here, not signing: the in-process app runs unsigned
    env = {**os.environ, "GRID_TASKS_SIGNING": "0"}
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("ok ")


def test_a_grid_tasks_worker_process_freezes_its_heap(
        settings: Settings, grid_env: dict[str, str], tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path / "logs")
    registry = NodeRegistry.from_url(settings.redis_url, settings.heartbeat_ttl)
    child = supervisor.spawn("node1", grid_tasks_command(
        "worker", "--rm", "rmA", "--node", "node1", "-l", "INFO", "--no-check"), env=grid_env)
    try:
        registry.wait_alive([("rmA", "node1")], timeout=30)
        deadline, found = time.monotonic() + 20, None
        while found is None and time.monotonic() < deadline:
            found = re.search(r"heap frozen at start: (\d+) objects",
                              child.log_path.read_text(errors="replace"))
            time.sleep(0.1)
        assert found is not None, child.log_tail(20)
        assert int(found.group(1)) > 20000
    finally:
        pids = supervisor.all_pids()
        supervisor.stop_all(timeout=10)
        registry.client.close()
    assert leftover(pids) == []
