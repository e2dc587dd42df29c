"""Who may ask for what: the roles of signers and the tasks each role may run.

Trust is per role, not per key: an operator trusts a certificate *as* a user, a
scheduler or a node (``grid-tasks keys trust --role``), and a worker runs a task
only when the verified signer of its message holds a role that task admits.

* ``user``: applications and people; they ask a gatekeeper for things (submit,
  cancel, coallocate) and may wake an RM's iteration.
* ``scheduler``: the grid's own services: scheduler workers, gatekeepers (which run
  their RM's iteration in place) and beats.  Only they may launch on a node.
* ``node``: node daemons; they report what their job managers saw, and their own
  registration, to their RM's gatekeeper (which checks and records them: a node
  holds no database credentials).  Only a node may send those.
* ``operator``: Flower and administrators (Maui's ADMIN); they may send Celery's
  remote-control commands (inspect, revoke, shutdown), set and release reservations
  and cancel any job, but start no job: an operator login can stop a worker, not run
  anything on a node.

Pure: a table and a lookup, no I/O.
"""

from __future__ import annotations

from enum import Enum


class Role(str, Enum):
    """A signer's role, given by where the operator put its certificate."""

    USER = "user"
    SCHEDULER = "scheduler"
    NODE = "node"
    OPERATOR = "operator"


ALL_ROLES: frozenset[Role] = frozenset(Role)
_SERVICES = frozenset({Role.SCHEDULER})
#: Every role that takes part in running jobs (operators watch and administer only).
_PARTIES = frozenset({Role.USER, Role.SCHEDULER, Role.NODE})
#: Who may send Celery remote-control commands (a worker's pidbox) at all.
CONTROL_ROLES: frozenset[Role] = frozenset({Role.SCHEDULER, Role.OPERATOR})

#: Task name -> the roles whose signed messages may run it.  A task not named here
#: admits only the grid's services (:data:`DEFAULT_ROLES`): a new task is closed
#: until someone decides who may send it.
TASK_ROLES: dict[str, frozenset[Role]] = {
    # node queue: processes start here, as root when the daemon is root
    "grid_tasks.gram.tasks.launch": _SERVICES,
    "grid_tasks.gram.tasks.launch_batch": _SERVICES,
    # read-only: a node reports its resources (``grid-tasks up``/``demo`` ask as the user)
    "grid_tasks.node.tasks.node_check": frozenset({Role.USER, Role.SCHEDULER}),
    # a node's reports to its RM's gatekeeper (checked there against the job's record)
    "grid_tasks.gram.report_tasks.record_reports": frozenset({Role.NODE}),
    "grid_tasks.gram.report_tasks.record_node": frozenset({Role.NODE}),
    # the one door: a user's requests at its RM's gatekeeper
    "grid_tasks.gram.gatekeeper.submit": frozenset({Role.USER}),
    "grid_tasks.gram.gatekeeper.cancel": frozenset({Role.USER, Role.SCHEDULER, Role.OPERATOR}),
    "grid_tasks.gram.gatekeeper.status": frozenset({Role.USER, Role.SCHEDULER, Role.OPERATOR}),
    # Maui's administrators: reservations of a whole RM
    "grid_tasks.reservation_tasks.set_reservation": frozenset({Role.OPERATOR, Role.SCHEDULER}),
    "grid_tasks.reservation_tasks.release_reservations": frozenset({Role.OPERATOR,
                                                                    Role.SCHEDULER}),
    # the DUROC door: a user's coallocation requests at the scheduler (the owner is the
    # verified signer; a scheduler may vouch for one)
    "grid_tasks.duroc.tasks.request": frozenset({Role.USER, Role.SCHEDULER}),
    "grid_tasks.duroc.tasks.add_subjobs": frozenset({Role.USER, Role.SCHEDULER}),
    "grid_tasks.duroc.tasks.delete_subjob": frozenset({Role.USER, Role.SCHEDULER}),
    "grid_tasks.duroc.tasks.release_barrier": frozenset({Role.USER, Role.SCHEDULER}),
    "grid_tasks.duroc.tasks.cancel": frozenset({Role.USER, Role.SCHEDULER}),
    "grid_tasks.duroc.tasks.status": frozenset({Role.USER, Role.SCHEDULER, Role.OPERATOR}),
    # ... whose subjobs the scheduler then submits at each RM's gatekeeper, vouching for
    # the job's owner (a user sending these directly would bypass the door)
    "grid_tasks.duroc.tasks.watch_subjob": _SERVICES,
    "grid_tasks.duroc.tasks.submit_subjob": _SERVICES,
    # wake-ups and settles: idempotent, they only make the owner look again
    "grid_tasks.scheduling.tasks.iterate": _PARTIES,
    "grid_tasks.duroc.tasks.settle": _PARTIES,
    "grid_tasks.scheduling.tasks.ping": _PARTIES,
    # the metascheduler asks RMs for estimates and reservations on a user's behalf
    "grid_tasks.scheduling.rm_tasks.estimate": frozenset({Role.USER, Role.SCHEDULER}),
    "grid_tasks.scheduling.rm_tasks.reserve": frozenset({Role.USER, Role.SCHEDULER}),
    "grid_tasks.scheduling.rm_tasks.release": frozenset({Role.USER, Role.SCHEDULER}),
    "grid_tasks.scheduling.rm_tasks.mark_enacted": frozenset({Role.USER, Role.SCHEDULER}),
    "grid_tasks.scheduling.rm_tasks.restore_tokens": frozenset({Role.USER, Role.SCHEDULER}),
    "grid_tasks.scheduling.rm_tasks.capacities": frozenset({Role.USER, Role.SCHEDULER}),
    "grid_tasks.scheduling.rm_tasks.prune": _SERVICES,
    # Celery's own chord machinery: only the scheduler starts chords (the DUROC door)
    "celery.chord_unlock": _SERVICES,
    "celery.accumulate": _SERVICES,
}

DEFAULT_ROLES: frozenset[Role] = _SERVICES


def roles_for(task_name: str) -> frozenset[Role]:
    """The roles that may run ``task_name`` (services only for a task not listed)."""
    return TASK_ROLES.get(task_name, DEFAULT_ROLES)


def parse_role(text: str) -> Role:
    """A :class:`Role` from its name; ValueError naming the known ones."""
    try:
        return Role(text.strip().lower())
    except ValueError:
        known = ", ".join(r.value for r in Role)
        raise ValueError(f"unknown role {text!r}: expected one of {known}") from None
