"""The scale harness: one worker process serving many node identities.

A thousand real node daemons do not fit on one machine (each is a Celery worker of
~100 MB), yet the shared parts of the grid (Redis, broker, gatekeepers, schedulers,
database) must be tried against a thousand nodes.  As Slurm's multiple-slurmd mode
does for its own scale tests, a harness process serves many identities over the real
protocol: each identity has its own node queue, its own registration (in Redis, and a
``record_node`` message to its RM's gatekeeper) and its own heartbeat key, so the
rest of the grid cannot tell it from a daemon of its own.  What is shared is what a
process has once: one consumer reading every identity's queue (one BRPOP over all
the keys), one heartbeat thread refreshing every identity in one pipelined round
trip, one watchdog and one lease context.  Launches are verified exactly as on a
daemon (the same app: signed by a scheduler, or refused).

The job's processes run through the real job manager, or (``jobs="standin"``) a
stand-in that reports the part started and exited 0 at once through the same report
path (:mod:`grid_tasks.gram.standin`), so the gatekeeper records ACTIVE then DONE
without a process being forked: the grid's own costs, measured alone.

Opt-in only: ``grid-tasks worker --harness --rm R --nodes 'n[001-100]'``,
``grid-tasks up --node-harness K``.  The identities come from the app setting
``grid_tasks_harness`` (a :class:`HarnessSpec`) or the variables ``GRID_TASKS_HARNESS``
(``RM:NODES;RM2:NODES``, node lists as :mod:`grid_tasks.hostlist` writes them) and
``GRID_TASKS_HARNESS_JOBS`` (``real`` or ``standin``).  Killing the process silences
every identity: each turns Unknown when its heartbeat key expires.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from celery import Celery, bootsteps
from celery.worker import state as worker_state

from grid_tasks.effects import send_registration, trigger_iteration
from grid_tasks.errors import GridTasksError
from grid_tasks.hostlist import compress, expand
from grid_tasks.leases import renew_bound
from grid_tasks.node.daemon import EX_CONFIG, Heartbeat
from grid_tasks.node.registry import NodeRegistry
from grid_tasks.node.resources import host_facts
from grid_tasks.node.watchdog import close_watchdogs, watchdog_for
from grid_tasks.queues import node_queue
from grid_tasks.security.startup import check_node_account
from grid_tasks.settings import app_settings
from grid_tasks.topology import GridTopology, load_topology

log = logging.getLogger(__name__)

ENV_HARNESS = "GRID_TASKS_HARNESS"
ENV_HARNESS_JOBS = "GRID_TASKS_HARNESS_JOBS"


class HarnessError(GridTasksError, ValueError):
    """A harness specification that cannot be served (malformed, or unknown nodes)."""


class JobsMode(str, Enum):
    """How a harness runs the job parts launched on its identities."""

    REAL = "real"        # the real job manager: processes forked, watched, reported
    STANDIN = "standin"  # reported started and exited 0 at once, nothing forked


@dataclass(frozen=True)
class HarnessSpec:
    """The identities ``(rm, node)`` one harness process serves, and its jobs mode."""

    identities: tuple[tuple[str, str], ...]
    jobs: JobsMode = JobsMode.REAL

    def to_env(self) -> dict[str, str]:
        """The variables a worker process reads this spec from."""
        return {ENV_HARNESS: format_identities(self.identities),
                ENV_HARNESS_JOBS: self.jobs.value}

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> "HarnessSpec | None":
        text = environ.get(ENV_HARNESS)
        if not text:
            return None
        raw = environ.get(ENV_HARNESS_JOBS) or JobsMode.REAL.value
        try:
            jobs = JobsMode(raw)
        except ValueError:
            raise HarnessError(f"{ENV_HARNESS_JOBS}={raw!r}: expected one of "
                               f"{', '.join(m.value for m in JobsMode)}") from None
        return cls(tuple(parse_identities(text)), jobs)

    def rms(self) -> list[str]:
        """The RMs of the identities, in first-seen order."""
        return list(dict.fromkeys(rm for rm, _ in self.identities))


def format_identities(identities: tuple[tuple[str, str], ...] | list[tuple[str, str]]) -> str:
    """``RM:NODES;RM2:NODES``, each node list compressed (``n[001-100]``)."""
    by_rm: dict[str, list[str]] = {}
    for rm, node in identities:
        by_rm.setdefault(rm, []).append(node)
    return ";".join(f"{rm}:{compress(nodes)}" for rm, nodes in by_rm.items())


def parse_identities(text: str) -> list[tuple[str, str]]:
    """The ``(rm, node)`` pairs of :func:`format_identities`' form; HarnessError if bad."""
    out: list[tuple[str, str]] = []
    for group in text.split(";"):
        rm, sep, nodes = group.strip().partition(":")
        if not sep or not rm or not nodes:
            raise HarnessError(f"harness identities {group!r}: expected RM:NODES "
                               "(e.g. rmA:n[001-100])")
        out += [(rm, node) for node in expand(nodes)]
    if len(set(out)) != len(out):
        raise HarnessError("harness identities: a node is named twice")
    return out


def harness_spec(app: Celery, environ: Mapping[str, str] | None = None) -> HarnessSpec | None:
    """The harness this app's workers run (app setting first, then the environment)."""
    configured = app.conf.get("grid_tasks_harness")
    if configured:
        return configured  # type: ignore[no-any-return]
    return HarnessSpec.from_env(os.environ if environ is None else environ)


def jobs_mode(app: Celery) -> JobsMode:
    """How launches run in this process: the stand-in only in a harness that asks."""
    spec = app.conf.get("grid_tasks_harness")
    return spec.jobs if spec else JobsMode.REAL


def check_identities(topology: GridTopology, spec: HarnessSpec) -> None:
    """HarnessError naming the identities the topology lacks (nothing registered yet)."""
    missing = []
    for rm, node in spec.identities:
        try:
            topology.node(rm, node)
        except GridTasksError:
            missing.append(f"{rm}/{node}")
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more"
                                          if len(missing) > 5 else "")
        raise HarnessError(f"harness nodes not in the topology {topology.source}: {shown}")


class HarnessHeartbeat(Heartbeat):
    """One thread beating for every identity, one pipelined round trip per beat."""

    def __init__(self, registry: NodeRegistry, spec: HarnessSpec, interval: float,
                 on_first: Any, on_revived: Any) -> None:
        super().__init__(registry, "harness", f"{len(spec.identities)} nodes", interval,
                         on_first=on_first, on_revived=on_revived)
        self.spec = spec

    def heartbeat(self) -> None:
        busy: dict[str, int] = {}
        for request in list(worker_state.active_requests):
            node = (getattr(request, "kwargs", None) or {}).get("node")
            busy[node] = busy.get(node, 0) + 1
        revived = self.registry.heartbeat_many(
            [(rm, node, busy.get(node, 0)) for rm, node in self.spec.identities], time.time())
        if revived and self.on_revived is not None:
            log.warning("harness: %d identities had expired (Unknown); back", len(revived))
            self.on_revived(list(dict.fromkeys(rm for rm, _ in revived)))


class HarnessStep(bootsteps.StartStopStep):
    """Worker bootstep of a harness: every identity's queue, registration, heartbeat,
    goodbye (a worker without a harness spec is left alone)."""

    label = "grid node harness"

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.heartbeat: HarnessHeartbeat | None = None
        self.spec = harness_spec(worker.app)
        if self.spec is None:
            return
        worker.app.conf.grid_tasks_harness = self.spec  # launches read the jobs mode
        settings = app_settings(worker.app)
        try:
            check_identities(load_topology(settings.topology_file), self.spec)
        except GridTasksError as exc:
            log.critical("node harness refused to start: %s", exc)
            raise SystemExit(EX_CONFIG) from None
        queues = worker.app.amqp.queues
        wanted = [node_queue(rm, node) for rm, node in self.spec.identities]
        if queues._consume_from is None:  # no -Q: never the default (scheduler) queue
            queues.select(wanted)
        else:
            for name in wanted:
                queues.select_add(name)

    def start(self, worker: Any) -> None:
        spec = self.spec
        if spec is None:
            return
        app, settings = worker.app, app_settings(worker.app)
        check_node_account(settings.gridmap_file, settings.single_user)
        registry = NodeRegistry.from_url(settings.redis_url, settings.heartbeat_ttl,
                                         settings=settings)
        topology = load_topology(settings.topology_file)
        resources = {(rm, node): topology.node(rm, node).resources()
                     for rm, node in spec.identities}
        registry.register_many([(rm, node, res) for (rm, node), res in resources.items()],
                               host_facts(), "configured", time.time())
        if spec.jobs is JobsMode.REAL:  # started once: no launch waits for it
            watchdog_for(renew_bound(settings))

        def first() -> None:
            try:
                at = time.time()
                for (rm, node), res in resources.items():
                    send_registration(app, rm, node, res, at)
            finally:
                _triggered(app, registry, spec.rms(), "registered")

        self.heartbeat = HarnessHeartbeat(
            registry, spec, settings.heartbeat_interval, on_first=first,
            on_revived=lambda rms: _triggered(app, registry, rms, "back"))
        self.heartbeat.start()
        log.info("node harness: %d identities of %s registered (jobs: %s)",
                 len(spec.identities), ", ".join(spec.rms()), spec.jobs.value)

    def stop(self, worker: Any) -> None:
        if self.heartbeat is None:
            return
        close_watchdogs()  # what still runs dies with the harness
        hb, self.heartbeat = self.heartbeat, None
        hb.stop()
        try:
            hb.registry.mark_down_many(list(hb.spec.identities), time.time())
        except GridTasksError as exc:
            log.warning("node harness: could not say goodbye: %s", exc)
            return
        _triggered(worker.app, hb.registry, hb.spec.rms(), "down")

    shutdown = terminate = stop


def _triggered(app: Celery, registry: NodeRegistry, rms: list[str], what: str) -> None:
    """Trigger the iteration of each RM once (not once per identity); never raises."""
    for rm in rms:
        try:
            trigger_iteration(app, rm, client=registry.client)
        except Exception as exc:  # broker or Redis away: beat's next iteration catches up
            log.warning("node harness %s: iteration of %s not triggered: %s", what, rm, exc)


def install(app: Celery) -> None:
    """Add the harness bootstep to ``app``'s workers (inert without a harness spec)."""
    app.steps["worker"].add(HarnessStep)
