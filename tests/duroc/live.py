"""A live grid for the DUROC control tests: the GRAM test grid plus one gatekeeper per RM.

The gatekeepers (``grid-tasks worker --rm RM``) are subprocesses, so tests can
SIGKILL one mid-header.  The job program enters the barrier and only then
writes a marker file: a marker proves user code ran past the barrier.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PROGRAM = """
import os, sys, pathlib
from grid_tasks import runtime
out = pathlib.Path(sys.argv[1])
mode = sys.argv[2] if len(sys.argv) > 2 else "plain"
if mode.startswith("pre"):  # not yet at the barrier for that long
    import time; time.sleep(float(mode[3:]))
runtime.barrier()
label = os.environ["GRID_TASKS_SUBJOB_LABEL"]
rank = runtime.intra_subjob_rank()
(out / f"{label}-{rank}").write_text("passed")
if mode == "exchange" and rank == 0:
    infos = runtime.bootstrap_subjob_exchange(label.encode(), timeout=20)
    (out / f"{label}-exchange").write_text(",".join(i.decode() for i in infos))
if mode == "tags" and rank == 0:
    layout = runtime.inter_subjob_structure(timeout=20)
    if label == "send":
        peer = [s.address for s in layout.subjobs if s.address != layout.local_address][0]
        runtime.inter_subjob_send(peer, "first", b"1")
        runtime.inter_subjob_send(peer, "second", b"2")
    else:
        got = [runtime.inter_subjob_receive("second", timeout=20),
               runtime.inter_subjob_receive("first", timeout=20)]
        (out / "tags").write_bytes(b",".join(got))
if mode.startswith("sleep"):
    import time; time.sleep(float(mode[5:]))
if mode == "fail":
    sys.exit(3)
"""


def start_gatekeepers(live: Any, rms: tuple[str, ...] = ("rmA", "rmB")) -> dict[str, Any]:
    from grid_tasks.embedded.stack import grid_tasks_command

    children = {}
    for rm in rms:
        argv = grid_tasks_command("worker", "--rm", rm, "-l", "WARNING", "-c", "4")
        children[rm] = live.supervisor.spawn(f"gatekeeper-{rm}-{time.monotonic_ns()}", argv,
                                             env=live.env)
    return children


def duroc_grid_of(redis_server: Any, tmp_path_factory: Any) -> Iterator[Any]:
    """A module's live DUROC grid: the GRAM test grid plus one gatekeeper process per RM."""
    import gc

    from tests.gram.conftest import _live_grid

    for live in _live_grid(redis_server, tmp_path_factory, None, gatekeepers=False):
        live.gatekeepers = start_gatekeepers(live)  # the RMs' only gatekeepers
        yield live
        gc.collect()  # Celery result objects unsubscribe while the grid's Redis is up


def program(tmp: Path) -> Path:
    path = tmp / "duroc_program.py"
    path.write_text(PROGRAM)
    return path


def component(rm: str, label: str, count: int, prog: Path, out: Path, mode: str = "plain",
              start: str | None = None, comms: str | None = None,
              executable: str | None = None) -> str:
    extra = ""
    if start:
        extra += f"(subjobStartType={start})"
    if comms:
        extra += f"(subjobCommsType={comms})"
    if executable:
        return (f'(&(resourceManagerContact={rm})(label={label})(count={count}){extra}'
                f'(executable="{executable}"))')
    return (f'(&(resourceManagerContact={rm})(label={label})(count={count}){extra}'
            f'(executable="{sys.executable}")(arguments="{prog}" "{out}" "{mode}"))')


def markers(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir())


class BrokerPublishes:
    """Every message published to the broker (kombu's Redis transport: an LPUSH/RPUSH on
    the broker's database) while in a ``with`` block, seen through MONITOR on a real
    redis-server: ``count`` of them, ``queues`` they went to."""

    def __init__(self, broker_url: str) -> None:
        import redis

        self._client = redis.Redis.from_url(broker_url)
        self._db = int(self._client.connection_pool.connection_kwargs.get("db", 0))
        self.queues: list[str] = []
        self.tasks: list[str] = []  # the task name of each (when readable)
        self._ready = __import__("threading").Event()
        self._stop = False

    def _listen(self) -> None:
        with self._client.monitor() as monitor:
            self._ready.set()
            for command in monitor.listen():
                if self._stop:
                    return
                words = command["command"].split(" ")
                if command.get("db") == self._db and words[0].upper() in ("LPUSH", "RPUSH"):
                    self.queues.append(words[1] if len(words) > 1 else "?")
                    found = re.search(r'"task": "([^"]+)"', command["command"])
                    self.tasks.append(found.group(1) if found else "?")

    @property
    def count(self) -> int:
        return len(self.queues)

    def __enter__(self) -> "BrokerPublishes":
        import threading

        self._thread = threading.Thread(target=self._listen, daemon=True)
        self._thread.start()
        assert self._ready.wait(5), "MONITOR did not start"
        time.sleep(0.1)  # the MONITOR reply is in: every command from now on is seen
        return self

    def __exit__(self, *exc: Any) -> None:
        time.sleep(0.1)
        self._stop = True
        self._client.ping()  # one more command wakes the listener to stop
        self._thread.join(5)
        self._client.close()
