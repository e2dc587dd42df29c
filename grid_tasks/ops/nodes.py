"""``checknode``: one node's state, configured and available resources, jobs and reservations."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from grid_tasks.db import Job, Node, Reservation
from grid_tasks.errors import NotFoundError
from grid_tasks.states import JobState, NodeState

from .common import ACTIVE_GRAM, check_rm
from .timefmt import iso


@dataclass
class NodeReport:
    """What checknode shows about one node."""

    name: str
    rm: str
    state: NodeState
    configured: dict[str, int]
    dedicated_procs: int
    reserved_procs: int
    features: list[str]
    last_heartbeat: datetime | None
    host: str | None
    jobs: list[dict[str, Any]] = field(default_factory=list)
    reservations: list[dict[str, Any]] = field(default_factory=list)

    @property
    def available_procs(self) -> int:
        """R.Available = R.Configured - R.Dedicated, less what admin reservations hold now."""
        return max(0, self.configured["procs"] - self.dedicated_procs - self.reserved_procs)

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.name, "rm": self.rm, "state": self.state.value,
                "configured": self.configured,
                "available": {"procs": self.available_procs},
                "dedicated": {"procs": self.dedicated_procs},
                "reserved": {"procs": self.reserved_procs}, "features": self.features,
                "last_heartbeat": iso(self.last_heartbeat), "host": self.host,
                "jobs": self.jobs, "reservations": self.reservations}


def find_node(session: Session, name: str, rm: str | None = None) -> Node:
    """The node ``name`` (names are unique grid-wide; ``rm`` narrows); NotFoundError."""
    check_rm(session, rm)
    stmt = select(Node).where(Node.name == name)
    if rm is not None:
        stmt = stmt.where(Node.rm == rm)
    found = list(session.scalars(stmt))
    if not found:
        raise NotFoundError(_unknown_node(session, name, rm))
    return found[0]


def _unknown_node(session: Session, name: str, rm: str | None) -> str:
    """Why ``name`` was not found: the nodes known (of ``rm`` only, when given), and the
    RM that does hold the node when the wrong one was named."""
    names = select(Node.name).order_by(Node.name)
    known = ", ".join(session.scalars(names.where(Node.rm == rm) if rm else names))
    if rm is None:
        return f"unknown node {name!r} (known: {known or 'none'})"
    elsewhere = session.scalar(select(Node.rm).where(Node.name == name))
    hint = f"; it is in {elsewhere!r}" if elsewhere else ""
    return f"unknown node {name!r} in resource manager {rm!r} ({rm}'s nodes: " \
           f"{known or 'none'}{hint})"


def reservation_procs(res: Reservation, node: str) -> int:
    """Processors ``res`` holds on ``node``: its stored per-node allocation, else all of
    them when the node is listed (whole-node reservation)."""
    alloc = (res.resources or {}).get("procs_by_node")
    if isinstance(alloc, dict):
        return int(alloc.get(node, 0))
    return -1 if node in (res.nodes or []) else 0  # -1: the whole node


def check_node(session: Session, name: str, now: datetime, rm: str | None = None,
               live: Any | None = None) -> NodeReport:
    """checknode at ``now``; ``live`` is the node's heartbeat status
    (:class:`grid_tasks.node.registry.NodeStatus`) when Redis is reachable."""
    node = find_node(session, name, rm)
    running = session.scalars(select(Job).where(Job.rm == node.rm,
                                                Job.state.in_(list(ACTIVE_GRAM))))
    jobs, dedicated = [], 0
    for job in running:
        tasks = int((job.nodes_allocated or {}).get(node.name, 0))
        if tasks:
            procs = tasks * max(1, job.procs // max(1, job.tasks))
            dedicated += procs
            jobs.append({"job_id": job.id, "user": job.user, "tasks": tasks, "procs": procs,
                         "state": JobState(job.state).value, "start_time": iso(job.start_time)})
    reservations, reserved = [], 0
    rows = session.scalars(select(Reservation).where(Reservation.rm == node.rm,
                                                     Reservation.end_time > now)
                           .order_by(Reservation.start_time, Reservation.id))
    for res in rows:
        procs = reservation_procs(res, node.name)
        if not procs:
            continue
        procs = node.procs if procs < 0 else procs
        reservations.append({"name": res.name, "kind": res.kind.value, "procs": procs,
                             "start": iso(res.start_time), "end": iso(res.end_time)})
        if res.start_time <= now and res.owner_job_id is None:
            reserved += procs
    reserved = min(reserved, max(0, node.procs - dedicated))
    state, last, host = _live_state(node, live, dedicated, reserved)
    return NodeReport(node.name, node.rm, state,
                      {"procs": node.procs, "memory_mb": node.memory_mb,
                       "disk_mb": node.disk_mb, "swap_mb": node.swap_mb},
                      dedicated, reserved,
                      list(node.features or []), last, host, jobs, reservations)


def _live_state(node: Node, live: Any | None, dedicated: int,
                reserved: int) -> tuple[NodeState, datetime | None, str | None]:
    """State from the heartbeat registry when given, else SQL; jobs on an up node make it
    Running, and Busy once no processor is left (dedicated or reserved)."""
    state, last, host = node.state, node.last_seen, None
    if live is not None:
        state = live.state
        host = live.host
        if live.last_heartbeat is not None:
            last = datetime.fromtimestamp(live.last_heartbeat, timezone.utc)
    if state in (NodeState.IDLE, NodeState.RUNNING, NodeState.BUSY) and dedicated:
        state = NodeState.BUSY if dedicated + reserved >= node.procs else NodeState.RUNNING
    return state, last, host
