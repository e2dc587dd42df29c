"""``diagnose -n [NODE]``: every node's state, processors and what looks wrong with it.

The figures are checknode's (:func:`grid_tasks.ops.nodes.check_node`: configured,
dedicated, reserved and available processors, jobs); the problems are what an
operator acts on: a stale or missing heartbeat, jobs on a node that is not up,
more processors dedicated than configured, or registered resources that disagree
with the SQL node table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from grid_tasks.db import Node
from grid_tasks.errors import GridTasksError
from grid_tasks.states import NodeState

from .common import check_rm
from .nodes import NodeReport, check_node, find_node
from .why import Reason

#: states in which a node takes (and runs) work
UP_STATES = frozenset({NodeState.IDLE, NodeState.RUNNING, NodeState.BUSY})


@dataclass
class NodeDiagnosis:
    """One node: checknode's report, heartbeat age and the problems found."""

    report: NodeReport
    heartbeat_age: float | None  # seconds since the last heartbeat (None: never / unknown)
    heartbeat_ttl: float | None  # None: no registry (Redis unreachable)
    problems: list[Reason] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        data = self.report.to_dict()
        data.update({"heartbeat_age_s": None if self.heartbeat_age is None
                     else round(self.heartbeat_age, 3),
                     "heartbeat_ttl_s": self.heartbeat_ttl,
                     "problems": [p.to_dict() for p in self.problems]})
        return data


def diagnose_nodes(session: Session, now: datetime, *, node: str | None = None,
                   rm: str | None = None, registry: Any = None) -> list[NodeDiagnosis]:
    """``diagnose -n``: one node, or every node (of ``rm``), with its problems.

    ``registry`` (a NodeRegistry) gives the live heartbeats; without it (Redis down)
    the SQL state is shown and heartbeats are not judged.
    """
    check_rm(session, rm)
    if node is not None:
        rows = [find_node(session, node, rm)]
    else:
        stmt = select(Node).order_by(Node.rm, Node.name)
        rows = list(session.scalars(stmt.where(Node.rm == rm) if rm else stmt))
    live = _statuses(registry, [(r.rm, r.name) for r in rows])
    ttl = registry.ttl_ms / 1000.0 if registry is not None and live is not None else None
    out = []
    for row in rows:
        status = live.get((row.rm, row.name)) if live is not None else None
        report = check_node(session, row.name, now, rm=row.rm, live=status)
        age = _age(report, now)
        diag = NodeDiagnosis(report, age, ttl)
        diag.problems = node_problems(report, age, ttl, status)
        out.append(diag)
    return out


def _statuses(registry: Any, names: list[tuple[str, str]]) -> dict[tuple[str, str], Any] | None:
    if registry is None or not names:
        return None if registry is None else {}

    try:
        return {(s.rm, s.node): s for s in registry.statuses(names)}
    except (GridTasksError, OSError):  # Redis went away since the shell pinged it
        return None


def _age(report: NodeReport, now: datetime) -> float | None:
    if report.last_heartbeat is None:
        return None
    return max(0.0, (now - report.last_heartbeat).total_seconds())


def node_problems(report: NodeReport, age: float | None, ttl: float | None,
                  status: Any = None) -> list[Reason]:
    """What is wrong with a node, given its checknode report and heartbeat age."""
    problems: list[Reason] = []
    if ttl is not None:
        if age is None:
            problems.append(Reason("heartbeat", "no heartbeat ever received: the node "
                                   "daemon never registered (is `grid-tasks worker --rm "
                                   f"{report.rm} --node {report.name}` running?)"))
        elif age > ttl:
            problems.append(Reason("heartbeat", f"stale heartbeat: last one {age:.1f} s ago, "
                                   f"older than the {ttl:g} s TTL (node daemon dead or "
                                   "cut off from Redis)"))
    configured = report.configured["procs"]
    if report.dedicated_procs > configured:
        problems.append(Reason("overallocated", f"over-allocation: {report.dedicated_procs} "
                               f"processors dedicated to jobs, {configured} configured"))
    if report.jobs and report.state not in UP_STATES:
        problems.append(Reason("state", f"{len(report.jobs)} running job(s) on a node in "
                               f"state {report.state.value}"))
    elif report.state in (NodeState.DOWN, NodeState.DRAINED):
        problems.append(Reason("state", f"node is {report.state.value}: it takes no new work"))
    registered = getattr(status, "procs", None)
    if registered is not None and registered != configured:
        problems.append(Reason("resources", f"the daemon registered {registered} processors, "
                               f"the node table says {configured} (topology out of date?)"))
    return problems
