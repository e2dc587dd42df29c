"""Flower as ``grid-tasks up --flower`` starts it, for the tests that talk to it:
the running stack, its HTTP API with and without basic auth, and a node check as
Flower shows it (tests/embedded/test_stack.py, test_stack_secrets.py)."""

from __future__ import annotations

import base64
import json
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from grid_tasks.celery_app import create_app
from grid_tasks.embedded.stack import EmbeddedStack, StackOptions
from grid_tasks.embedded.supervisor import leftover
from grid_tasks.node.tasks import NODE_CHECK, check_options
from tests.conftest import DEMO_TOPOLOGY
from tests.waiting import until


def get_json(url: str, auth: str | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.loads(reply.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, None
    except urllib.error.URLError:
        return 0, None  # not listening (yet, or any more)


@contextmanager
def flower_stack(state_dir: Path) -> Iterator[EmbeddedStack]:
    """The demo grid with Flower, running; every process of it gone afterwards."""
    stack = EmbeddedStack(StackOptions(topology_file=DEMO_TOPOLOGY, state_dir=state_dir,
                                       flower=True, heartbeat_interval=0.5, loglevel="WARNING"))
    stack.start()
    pids = stack.pids()
    try:
        yield stack
    finally:
        stack.stop()
        assert leftover(pids) == [], "stack processes survived"


def flower_shown_check(stack: EmbeddedStack, rm: str, node: str,
                       timeout: float = 45) -> dict[str, Any]:
    """A node check as Flower's API shows it once done, seen whole by Flower.

    Flower shows only what happens after its event receiver has subscribed, which its
    HTTP side says nothing about, and a task it began to see midway has no name: send
    a check every two seconds until Flower shows one from its receipt to its success.
    """
    api = stack.flower_url.rstrip("/") + "/api/"
    app = create_app(stack.settings)
    sent: list[Any] = []

    def shown() -> dict[str, Any] | None:
        if not sent or sent[-1][1] + 2 < time.monotonic():
            result = app.send_task(NODE_CHECK, **check_options(rm, node))
            assert result.get(timeout=30)["node"] == node
            sent.append((result.id, time.monotonic()))
        code, tasks = get_json(api + "tasks", stack.flower_auth)
        assert code == 200
        return next((t for i, _ in sent if (t := (tasks or {}).get(i))
                     and t.get("state") == "SUCCESS" and t.get("received")), None)

    try:
        return until(shown, timeout, "Flower to show a node check", poll=0.2)
    finally:
        app.close()


class TaskEvents:
    """Every task event of a live grid as Flower receives them, recorded by a thread
    (``with TaskEvents(app) as seen: ...``; ``seen.events`` holds them in order)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.events: list[dict[str, Any]] = []
        self.ready = threading.Event()
        self._receiver: Any = None
        self._thread = threading.Thread(target=self._capture, daemon=True,
                                        name="task events")

    def _capture(self) -> None:
        with self.app.connection_for_read() as conn:
            receiver = self._receiver = self.app.events.Receiver(
                conn, handlers={"*": self.events.append})
            with receiver.consumer_context(wakeup=False) as (live, _, _):
                for _ in range(2):  # kombu's Redis transport subscribes on its first poll
                    try:
                        live.drain_events(timeout=0.2)
                    except TimeoutError:
                        pass
                self.ready.set()  # subscribed: every event from now on is seen
                while not receiver.should_stop:
                    try:
                        live.drain_events(timeout=0.3)
                    except TimeoutError:
                        continue

    def __enter__(self) -> "TaskEvents":
        self._thread.start()
        assert self.ready.wait(20), "event receiver did not subscribe"
        return self

    def __exit__(self, *_: Any) -> None:
        if self._receiver is not None:
            self._receiver.should_stop = True
        self._thread.join(10)

    def of(self, uuid: str) -> list[str]:
        """The types of the events about task ``uuid``, in order."""
        return [e["type"] for e in list(self.events) if e.get("uuid") == uuid]

    def names(self) -> dict[str, str]:
        """Task id -> the name its events gave it (received or sent)."""
        return {e["uuid"]: e["name"] for e in list(self.events)
                if e.get("uuid") and e.get("name")}


def flower_task(stack: EmbeddedStack, pattern: str, state: str,
                timeout: float = 30) -> dict[str, Any]:
    """The first task Flower's API lists whose name matches the regular expression
    ``pattern`` in ``state``, with its ``uuid``."""
    api = stack.flower_url.rstrip("/") + "/api/tasks"

    def shown() -> dict[str, Any] | None:
        code, tasks = get_json(api, stack.flower_auth)
        assert code == 200
        return next(({**t, "uuid": i} for i, t in (tasks or {}).items()
                     if re.fullmatch(pattern, t.get("name") or "")
                     and t.get("state") == state), None)

    return until(shown, timeout, f"Flower to show a task {pattern!r} {state}", poll=0.3)
