"""Queue names and readable task labels of the grid, without Celery: what routes, workers,
Flower and metrics agree on.

Kept apart from :mod:`grid_tasks.celery_app` so that processes that only need the
names (the metrics exporter of ``grid-tasks up``, for one) never pay Celery's import.
"""

from __future__ import annotations

import re

from grid_tasks.errors import GridTasksError

SCHEDULER_QUEUE = "scheduler"
#: Prefix of an RM's iteration queue (:func:`iteration_queue`).
ITERATION_PREFIX = "iterate"

#: The tasks of one RM's scheduler: its Maui iteration and its node watch.  Each RM's
#: travel on a queue of their own (:func:`iteration_queue`), so a deep RM's costly
#: iterations can be served by a process of their own (``[rm.X] scheduler = "own"``)
#: and never hold the workers the other RMs' iterations need (issue 25).
ITERATION_TASKS: frozenset[str] = frozenset({
    "grid_tasks.scheduling.tasks.iterate", "grid_tasks.scheduling.tasks.watch_nodes"})

#: Housekeeping tasks: beat sends them every few seconds per resource manager (an
#: idle ``grid-tasks up`` ran 69 a minute, 276 task events), so in Flower they would
#: bury the users' work.
#: They send no task events (:data:`grid_tasks.celery_app.HOUSEKEEPING`) unless one
#: fails: a failing iteration is the operator's business.
HOUSEKEEPING_TASKS: frozenset[str] = ITERATION_TASKS
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


class QueueNameError(GridTasksError, ValueError):
    """A resource manager or node name that cannot be part of a queue name."""


def _check(kind: str, name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise QueueNameError(f"invalid {kind} name {name!r}: use letters, digits, '_' and '-'")
    return name


def gatekeeper_queue(rm: str) -> str:
    """The queue of resource manager ``rm``'s GRAM gatekeeper: ``gram.<rm>``."""
    return f"gram.{_check('resource manager', rm)}"


def node_queue(rm: str, node: str) -> str:
    """The queue of one node daemon: ``node.<rm>.<node>``."""
    return f"node.{_check('resource manager', rm)}.{_check('node', node)}"


def iteration_queue(rm: str) -> str:
    """The queue of resource manager ``rm``'s iterations and node watch: ``iterate.<rm>``.

    Served by the shared scheduler workers, or by the RM's own ``grid-tasks worker
    --iterations RM`` when the topology marks it ``scheduler = "own"``."""
    return f"{ITERATION_PREFIX}.{_check('resource manager', rm)}"


def readable(verb: str, *, job: object = None, rm: str | None = None,
             node: str | None = None, **details: object) -> dict[str, str]:
    """``shadow``/``argsrepr`` options so Flower shows what a task does.

    >>> readable("launch", job=42, rm="rmA", node="node1")["shadow"]
    'launch job 42 on rmA/node1'
    """
    words = [verb]
    if job is not None:
        words.append(f"job {job}")
    where = "/".join(p for p in (rm, node) if p)
    if where:
        words.append(f"on {where}")
    shown: dict[str, object] = {k: v for k, v in (("job", job), ("rm", rm), ("node", node))
                                if v is not None}
    shown.update(details)
    args = ", ".join(f"{k}={v!r}" for k, v in shown.items())
    return {"shadow": " ".join(words), "argsrepr": f"({args})", "kwargsrepr": "{}"}
