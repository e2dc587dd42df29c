"""Gather the grid's metrics from where they live: broker, SQL, registry, Redis.

Every source is read independently: one that cannot be reached reports
``grid_tasks_scrape_source_up{source=...} 0`` and the others still report, so a
Redis or database outage shows in the metrics instead of breaking the scrape.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import redis
from sqlalchemy import func, select

from grid_tasks.db import get_engine, session_factory, session_scope
from grid_tasks.db.models import Job, Reservation
from grid_tasks.errors import GridTasksError
from grid_tasks.ha.status import read_status
from grid_tasks.legion.tokens import TokenStore
from grid_tasks.metrics.exposition import MetricFamily
from grid_tasks.metrics.iteration import read_iterations
from grid_tasks.node.registry import NodeRegistry
from grid_tasks.queues import SCHEDULER_QUEUE, gatekeeper_queue, iteration_queue, node_queue
from grid_tasks.security.connections import redis_client
from grid_tasks.security.refusals import KINDS, counts
from grid_tasks.settings import Settings
from grid_tasks.states import JobState, MauiJobState, NodeState
from grid_tasks.topology import GridTopology, load_topology
from grid_tasks.utc import as_utc, from_epoch

log = logging.getLogger(__name__)

# kombu's Redis transport keeps priorities 3, 6 and 9 in sibling lists of the queue
# (this grid's own apps use one list a queue, celery_app.REDIS_TRANSPORT_OPTIONS; a
# sender configured otherwise may still fill the siblings).
_PRIORITY_SEP = "\x06\x16"
_PRIORITIES = (3, 6, 9)
_UNACKED = "unacked"


class Sources:
    """Connections for one scrape (made on first use, closed by :meth:`close`)."""

    def __init__(self, settings: Settings, topology: GridTopology) -> None:
        self.settings = settings
        self.topology = topology
        self._clients: dict[str, redis.Redis] = {}

    def redis(self, url: str) -> redis.Redis:
        if url not in self._clients:
            self._clients[url] = redis_client(self.settings, url, socket_connect_timeout=2,
                                              socket_timeout=5)
        return self._clients[url]

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def rm_names(self, *extra: str | None) -> list[str]:
        return sorted(set(self.topology.rms) | {r for r in extra if r})


def queues_of(topology: GridTopology) -> list[tuple[str, dict[str, str]]]:
    """Every queue of the grid with its labels: scheduler, RMs' iterations, gatekeepers,
    node daemons."""
    found = [(SCHEDULER_QUEUE, {"kind": "scheduler", "rm": "", "node": ""})]
    for rm in sorted(topology.rms):
        found.append((iteration_queue(rm), {"kind": "iterations", "rm": rm, "node": ""}))
        found.append((gatekeeper_queue(rm), {"kind": "gatekeeper", "rm": rm, "node": ""}))
    for spec in topology.iter_nodes():
        found.append((node_queue(spec.rm, spec.name),
                      {"kind": "node", "rm": spec.rm, "node": spec.name}))
    return found


def queue_metrics(src: Sources) -> list[MetricFamily]:
    """Messages waiting per queue (Redis list lengths) and messages delivered but unacked."""
    url = src.settings.broker_url
    if url.split("://", 1)[0] not in {"redis", "rediss"}:
        raise GridTasksError("queue depth is read from a Redis broker only")
    client = src.redis(url)
    queues = queues_of(src.topology)
    pipe = client.pipeline(transaction=False)
    for name, _ in queues:
        pipe.llen(name)
        for prio in _PRIORITIES:
            pipe.llen(f"{name}{_PRIORITY_SEP}{prio}")
    pipe.hlen(_UNACKED)
    *lengths, unacked = pipe.execute()
    depth = MetricFamily("grid_tasks_queue_messages", "gauge",
                         "Messages waiting in a broker queue.")
    step = 1 + len(_PRIORITIES)
    for i, (name, labels) in enumerate(queues):
        depth.add(sum(lengths[i * step:(i + 1) * step]), queue=name, **labels)
    return [depth, MetricFamily("grid_tasks_broker_unacked_messages", "gauge",
                                "Messages delivered to a worker and not yet acknowledged.")
            .add(unacked)]


def job_metrics(src: Sources) -> list[MetricFamily]:
    """Jobs per RM by GRAM state and by Maui state (Idle, Running, ...), from SQL."""
    with session_scope(session_factory(get_engine(src.settings.database_url))) as session:
        gram = session.execute(select(Job.rm, Job.state, func.count())
                               .group_by(Job.rm, Job.state)).all()
        maui = session.execute(select(Job.rm, Job.maui_state, func.count())
                               .group_by(Job.rm, Job.maui_state)).all()
    rms = src.rm_names(*(r for r, _, _ in gram))
    return [_by_state("grid_tasks_jobs", "Jobs per resource manager and GRAM state.",
                      gram, rms, JobState),
            _by_state("grid_tasks_maui_jobs",
                      "Jobs per resource manager and Maui state (Idle, Running, ...).",
                      maui, rms, MauiJobState)]


def _by_state(name: str, text: str, rows: Any, rms: list[str], states: Any) -> MetricFamily:
    counts = Counter({(rm or "", getattr(st, "value", st)): n for rm, st, n in rows if st})
    fam = MetricFamily(name, "gauge", text)
    for rm in rms:
        for state in states:
            fam.add(counts.get((rm, state.value), 0), rm=rm, state=state.value)
    return fam


def reservation_metrics(src: Sources, now: float) -> list[MetricFamily]:
    """Reservations not yet over, per RM, kind and phase (active now or future), from SQL."""
    at = from_epoch(now)
    with session_scope(session_factory(get_engine(src.settings.database_url))) as session:
        rows = session.execute(select(Reservation.rm, Reservation.kind, Reservation.start_time)
                               .where(Reservation.end_time > at)).all()
    counts = Counter((rm or "", getattr(kind, "value", kind),
                      "active" if as_utc(start) <= at else "future") for rm, kind, start in rows)
    fam = MetricFamily("grid_tasks_reservations", "gauge",
                       "Reservations not yet over, per RM, kind and phase.")
    for rm in src.rm_names(*(r for r, _, _ in counts)):
        for kind in ("admin", "job", "grid"):
            for phase in ("active", "future"):
                fam.add(counts.get((rm, kind, phase), 0), rm=rm, kind=kind, phase=phase)
    return [fam]


def token_metrics(src: Sources) -> list[MetricFamily]:
    """Live broker reservation tokens: held (unconfirmed, expiring) and confirmed."""
    tokens = TokenStore(src.redis(src.settings.redis_url)).tokens()
    held = sum(1 for t in tokens if not t.confirmed)
    return [MetricFamily("grid_tasks_reservation_tokens", "gauge",
                         "Live reservation tokens of the grid broker.")
            .add(held, state="held").add(len(tokens) - held, state="confirmed")]


def node_metrics(src: Sources) -> list[MetricFamily]:
    """Nodes per RM and state as the registry sees them (Unknown when silent)."""
    registry = NodeRegistry(src.redis(src.settings.redis_url), src.settings.heartbeat_ttl)
    counts = Counter((s.rm, s.state.value) for s in registry.list_nodes(src.topology))
    fam = MetricFamily("grid_tasks_nodes", "gauge", "Nodes per resource manager and state.")
    for rm in src.rm_names(*(r for r, _ in counts)):
        for state in NodeState:
            fam.add(counts.get((rm, state.value), 0), rm=rm, state=state.value)
    return [fam]


def iteration_metrics(src: Sources) -> list[MetricFamily]:
    """Scheduling iteration durations per RM (recorded by the iteration task)."""
    hist = MetricFamily("grid_tasks_iteration_duration_seconds", "histogram",
                        "Duration of the Maui scheduling iterations per resource manager.")
    last = MetricFamily("grid_tasks_iteration_last_seconds", "gauge",
                        "Duration of the latest scheduling iteration per resource manager.")
    for stats in read_iterations(src.redis(src.settings.redis_url)):
        hist.add_histogram(stats.buckets, stats.count, stats.sum, rm=stats.rm)
        if stats.last is not None:
            last.add(stats.last, rm=stats.rm)
    return [hist, last]


def beat_metrics(src: Sources) -> list[MetricFamily]:
    """Which beat leads, how many stand by, and what each has sent."""
    status = read_status(src.redis(src.settings.redis_url))
    leader = MetricFamily("grid_tasks_beat_leader", "gauge",
                          "1 for the beat holding the leadership lease.")
    if status.leader:
        leader.add(1, identity=status.leader)
    roles = Counter(m.role for m in status.members)
    members = MetricFamily("grid_tasks_beat_members", "gauge", "Beat processes by role.")
    for role in ("leader", "standby", "silent"):
        members.add(roles.get(role, 0), role=role)
    sent = MetricFamily("grid_tasks_beat_sent_total", "counter",
                        "Periodic tasks sent by each beat.")
    for m in status.members:
        sent.add(m.emitted, identity=m.identity)
    return [leader, members, sent]


def refusal_metrics(src: Sources) -> list[MetricFamily]:
    """Messages the workers refused (unsigned, untrusted, wrong role ...), by reason."""
    seen = counts(src.redis(src.settings.redis_url))
    fam = MetricFamily("grid_tasks_messages_refused_total", "counter",
                       "Task and control messages refused by the grid's workers, by reason.")
    for kind in sorted(set(KINDS) | set(seen)):
        fam.add(seen.get(kind, 0), reason=kind)
    return [fam]


#: source name -> reader; each gets the scrape's Sources (and the time where it matters).
SOURCES: dict[str, Callable[[Sources, float], list[MetricFamily]]] = {
    "broker": lambda src, now: queue_metrics(src),
    "database": lambda src, now: job_metrics(src) + reservation_metrics(src, now),
    "registry": lambda src, now: node_metrics(src),
    "redis": lambda src, now: (iteration_metrics(src) + token_metrics(src) + beat_metrics(src)
                               + refusal_metrics(src)),
}


def collect(settings: Settings, *, topology: GridTopology | None = None,
            now: float | None = None) -> list[MetricFamily]:
    """Every metric of the grid, read now; unreachable sources are marked down."""
    started = time.monotonic()
    now = time.time() if now is None else now
    src = Sources(settings, topology or load_topology(settings.topology_file))
    families: list[MetricFamily] = []
    up = MetricFamily("grid_tasks_scrape_source_up", "gauge",
                      "1 if the source answered this scrape, 0 if it failed.")
    try:
        for name, read in SOURCES.items():
            try:
                families += read(src, now)
                up.add(1, source=name)
            except Exception as exc:  # any failure of one source must not fail the scrape
                first = (str(exc).strip() or type(exc).__name__).splitlines()[0]
                log.warning("metrics: source %s failed: %s", name, first)
                up.add(0, source=name)
    finally:
        src.close()
    took = MetricFamily("grid_tasks_scrape_duration_seconds", "gauge",
                        "Seconds this scrape took.").add(round(time.monotonic() - started, 6))
    return [*families, up, took]
