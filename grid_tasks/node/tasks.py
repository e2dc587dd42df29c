"""Node tasks.  ``node_check`` is the demo workload: each node daemon reports itself."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from grid_tasks.errors import GridTasksError
from grid_tasks.node.daemon import node_identity
from grid_tasks.node.harness import harness_spec
from grid_tasks.node.resources import detect_resources, host_facts
from grid_tasks.queues import readable
from grid_tasks.settings import app_settings
from grid_tasks.topology import load_topology

NODE_CHECK = "grid_tasks.node.tasks.node_check"


@shared_task(name=NODE_CHECK, bind=True)
def node_check(self: Any, *, rm: str, node: str) -> dict[str, Any]:
    """Report this node's detected resources and host facts, next to its configured spec.

    Routed to ``node.<rm>.<node>`` by the ``rm``/``node`` keyword arguments, so
    the answer proves that very daemon is alive and consuming.
    """
    settings = app_settings(self.app)
    served = node_identity(self.app)
    spec = harness_spec(self.app)
    if spec is not None and (rm, node) in spec.identities:
        served = (rm, node)  # one of this harness's identities
    try:
        configured: dict[str, Any] | None = load_topology(settings.topology_file).node(
            rm, node).resources()
    except GridTasksError:
        configured = None
    delivery = self.request.delivery_info or {}
    return {
        "rm": rm,
        "node": node,
        "served_by": {"rm": served[0], "node": served[1], "worker": self.request.hostname},
        "queue": delivery.get("routing_key"),
        "configured": configured,
        "detected": detect_resources(settings.state_dir if settings.state_dir.exists() else "/"),
        "facts": host_facts(),
    }


def check_options(rm: str, node: str) -> dict[str, Any]:
    """``apply_async`` options for a readable node check in Flower."""
    return {"kwargs": {"rm": rm, "node": node}, **readable("check node", rm=rm, node=node)}
