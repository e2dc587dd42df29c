"""The door of coallocated jobs as both sides see it: its requests' names, and the
checks an application runs before it asks (the scheduler runs them again).

The application's side is :mod:`grid_tasks.duroc.client`, the scheduler's
:mod:`grid_tasks.duroc.control_door`; this module needs neither a database nor Celery.
"""

from __future__ import annotations

import getpass
from typing import Any

from grid_tasks.duroc.errors import CoallocRequestError

#: Longest a coallocated job waits for its barrier by default (seconds).
DEFAULT_BARRIER_TIMEOUT_S = 300.0

#: The door's requests, served by the scheduler worker (:mod:`grid_tasks.duroc.tasks`).
REQUEST = "grid_tasks.duroc.tasks.request"
ADD_SUBJOBS = "grid_tasks.duroc.tasks.add_subjobs"
DELETE_SUBJOB = "grid_tasks.duroc.tasks.delete_subjob"
RELEASE_BARRIER = "grid_tasks.duroc.tasks.release_barrier"
CANCEL = "grid_tasks.duroc.tasks.cancel"
#: A status query: the job's snapshot (settling its fate when it is due).
STATUS = "grid_tasks.duroc.tasks.status"
#: A no-barrier subjob's submission, which the scheduler asks of the subjob's gatekeeper.
SUBMIT_SUBJOB = "grid_tasks.duroc.tasks.submit_subjob"


def labels(subs: list[Any], taken: set[str]) -> list[str]:
    """Each component's label (``subjobN`` when none), refusing duplicates."""
    labels: list[str] = []
    for sub in subs:
        label = sub.label or f"subjob{len(taken) + len(labels)}"
        if label in taken or label in labels:
            raise CoallocRequestError(f"duplicate subjob label {label!r} in the multi-request")
        labels.append(label)
    return labels


def login() -> str:
    """This process's user: who an unsigned grid takes the requester to be."""
    return getpass.getuser()
