"""scale_grid's watching of a grid it started: when it is idle enough to measure, and
progress lines while its load runs (stderr, so the table on stdout stays clean)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from grid_tasks.settings import Settings


def _say(what: str) -> None:
    """A progress line (stderr: the table on stdout stays clean)."""
    print(f"  [{time.strftime('%H:%M:%S')}] {what}", file=sys.stderr, flush=True)


def _clients(client: redis.Redis) -> int:
    return int(client.info("clients")["connected_clients"])


#: Kombu's binding set of the remote-control queues: one member per worker consuming
#: (the schedulers and gatekeepers; lean node harnesses take no remote control).
PIDBOX_BINDINGS = "_kombu.binding.celery.pidbox"
#: Kombu's hash of delivered, unacknowledged messages.
UNACKED = "unacked"


def _settled(client: redis.Redis, broker: redis.Redis, workers: int, backlog: int,
             steady_s: float = 4.0, limit_s: float = 300.0) -> float:
    """Seconds until the grid is idle: every shared worker consumes (``workers``
    remote-control bindings in the broker), the start-up backlog is worked off (fewer
    than ``backlog`` messages queued: beat's periodic ones come and go), and then the
    Redis client count stays the same for ``steady_s``.

    An idle window that begins earlier measures start-up: the workers connect lazily,
    seconds after the nodes registered on a loaded machine (a client count alone was
    seen steady at 6, before any worker), and the gatekeepers then still record every
    node's registration (1,000 of them: 40% of a core for tens of seconds)."""
    began = time.monotonic()

    def waiting() -> bool:
        return time.monotonic() - began < limit_s

    while broker.scard(PIDBOX_BINDINGS) < workers and waiting():
        time.sleep(0.5)
    while _queued(broker) >= backlog and waiting():
        time.sleep(0.5)
    last, since = _clients(client), time.monotonic()
    while time.monotonic() - since < steady_s and waiting():
        time.sleep(0.5)
        now = _clients(client)
        if now != last:
            last, since = now, time.monotonic()
    return time.monotonic() - began


def _queued(broker: redis.Redis) -> int:
    """Messages waiting in every queue kombu has bound (its binding sets name them),
    plus those delivered and not yet acknowledged (prefetched by a busy worker)."""
    queues = {m.rsplit(b"\x06\x16", 1)[-1] for key in broker.scan_iter(b"_kombu.binding.*")
              for m in broker.smembers(key)}
    pipe = broker.pipeline(transaction=False)
    for name in queues:
        pipe.llen(name)
    pipe.hlen(UNACKED)
    return sum(pipe.execute())


@contextmanager
def _reporting(settings: Settings, label: str, jobs: int, period: float) -> Iterator[None]:
    """Print every ``period`` seconds how many jobs were submitted and ended so far (a
    thread reading the grid's database: the clients report only when they are done,
    and 10,000 jobs take minutes to submit)."""
    from sqlalchemy import func, select

    from grid_tasks import db
    from grid_tasks.db.models.jobs import Job
    from grid_tasks.states import JobState

    ended = [s for s in JobState if s.terminal]
    sessions = db.session_factory(db.get_engine(settings.database_url))
    stop = threading.Event()

    def report() -> None:
        while not stop.wait(period):
            try:
                with db.session_scope(sessions) as session:
                    stored = session.scalar(select(func.count(Job.id)))
                    done = session.scalar(select(func.count(Job.id)).where(
                        Job.state.in_(ended)))
            except Exception as exc:  # noqa: BLE001 - a progress line is not worth a failure
                _say(f"{label}: progress unreadable ({exc})")
                continue
            _say(f"{label}: {stored}/{jobs} jobs submitted, {done} ended")

    thread = threading.Thread(target=report, name="progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
