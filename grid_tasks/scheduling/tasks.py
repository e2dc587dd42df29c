"""The scheduler's tasks: the Maui iteration per resource manager and the node watch.

Beat fires the iteration every ``RMPOLLINTERVAL`` of each RM's maui.cfg (per-RM
entries are installed at beat start, over the foundation's default interval);
events fire it through :func:`grid_tasks.effects.trigger_iteration`.  The locked
run itself is :func:`grid_tasks.scheduling.runner.iterate_here`.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from celery.signals import beat_init

from grid_tasks.celery_app import HOUSEKEEPING, readable, register_periodic
from grid_tasks.effects import ITERATE
from grid_tasks.errors import GridTasksError
from grid_tasks.maui.cfg import load_maui_config
from grid_tasks.node.registry import NodeRegistry
from grid_tasks.scheduling.nodes import watch_nodes as watch
from grid_tasks.scheduling import warm_start  # noqa: F401 - loads the RMs' queues at start
from grid_tasks.scheduling.runner import iterate_here
from grid_tasks.services import services_for
from grid_tasks.settings import app_settings
from grid_tasks.topology import load_topology

log = logging.getLogger(__name__)

#: Default period when an RM's maui.cfg cannot be read (Maui's RMPOLLINTERVAL default).
DEFAULT_POLL_S = 30.0

register_periodic(ITERATE, DEFAULT_POLL_S)


@shared_task(name=ITERATE, bind=True, ignore_result=True, **HOUSEKEEPING)
def iterate(self: Any, *, rm: str) -> int:
    """Run ``rm``'s iteration until no trigger is pending; returns how many ran."""
    return iterate_here(services_for(self.app), rm)


WATCH_NODES = "grid_tasks.scheduling.tasks.watch_nodes"


@shared_task(name=WATCH_NODES, bind=True, ignore_result=True, **HOUSEKEEPING)
def watch_nodes(self: Any, *, rm: str) -> list[str]:
    """Trigger ``rm``'s iteration when one of its nodes changed state, above all when a
    silent node's heartbeat expired (Unknown): beat runs it every heartbeat TTL."""
    services = services_for(self.app)
    registry = NodeRegistry(services.redis, services.settings.heartbeat_ttl)
    changes = watch(self.app, rm, registry)
    return [f"{c.node}: {c.before} -> {c.after}" for c in changes]


def _per_rm_schedule(sender: Any = None, **_: Any) -> None:
    """At beat start: each RM's iteration every RMPOLLINTERVAL of its own maui.cfg, and
    its node watch every heartbeat TTL (a silent node turns Unknown by TTL expiry)."""
    settings = app_settings(sender.app)
    try:
        topology = load_topology(settings.topology_file)
    except GridTasksError as exc:
        log.error("beat: no per-RM iteration schedule: %s", exc)
        return
    entries = {}
    for name, spec in topology.rms.items():
        every = poll_interval(spec.policy_file)
        entries[f"{ITERATE}[{name}]"] = {
            "task": ITERATE, "schedule": every, "kwargs": {"rm": name},
            "options": {**readable("iterate", rm=name), "expires": every}}
        ttl = float(settings.heartbeat_ttl)
        entries[f"{WATCH_NODES}[{name}]"] = {
            "task": WATCH_NODES, "schedule": ttl, "kwargs": {"rm": name},
            "options": {**readable("watch nodes", rm=name), "expires": ttl}}
    sender.scheduler.update_from_dict(entries)


def poll_interval(policy_file: Any) -> float:
    """RMPOLLINTERVAL of a maui.cfg in seconds (default 30 when unreadable or unset)."""
    if not policy_file:
        return DEFAULT_POLL_S
    try:
        value = float(load_maui_config(policy_file).get("RMPOLLINTERVAL"))
    except (GridTasksError, OSError, TypeError, ValueError) as exc:
        log.warning("RMPOLLINTERVAL of %s unreadable (%s); using %g s", policy_file, exc,
                    DEFAULT_POLL_S)
        return DEFAULT_POLL_S
    return value if value > 0 else DEFAULT_POLL_S


beat_init.connect(_per_rm_schedule, weak=False, dispatch_uid="grid_tasks.scheduling.per_rm")


PING = "grid_tasks.scheduling.tasks.ping"


@shared_task(name=PING)
def ping() -> str:
    """A no-op on the scheduler queue: the bare round trip the GRAM benchmark compares to."""
    return "pong"
