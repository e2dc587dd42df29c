"""State enums shared by the SQL models, the node daemons, the CLI and the Maui core."""

from __future__ import annotations

from enum import Enum


class JobState(str, Enum):
    """GRAM job states, as a Globus job manager reports them."""

    UNSUBMITTED = "UNSUBMITTED"
    STAGE_IN = "STAGE_IN"
    PENDING = "PENDING"
    ACTIVE = "ACTIVE"
    SUSPENDED = "SUSPENDED"
    STAGE_OUT = "STAGE_OUT"
    DONE = "DONE"
    FAILED = "FAILED"

    def __str__(self) -> str:
        """``DONE``, as GRAM and globusrun print it (``print(status.state)``), not
        ``JobState.DONE``."""
        return self.value

    @property
    def terminal(self) -> bool:
        return self in (JobState.DONE, JobState.FAILED)

    @property
    def maui(self) -> "MauiJobState":
        """Maui's view of the same job (showq's Idle / Running / Completed)."""
        if self in (JobState.ACTIVE, JobState.SUSPENDED, JobState.STAGE_OUT):
            return MauiJobState.RUNNING
        if self.terminal:
            return MauiJobState.COMPLETED if self is JobState.DONE else MauiJobState.REMOVED
        return MauiJobState.IDLE


class MauiJobState(str, Enum):
    """Maui's job states (showq/checkjob vocabulary)."""

    IDLE = "Idle"
    HOLD = "Hold"
    DEFERRED = "Deferred"
    BLOCKED = "Blocked"
    STARTING = "Starting"
    RUNNING = "Running"
    COMPLETED = "Completed"
    REMOVED = "Removed"


#: Maui states of a PENDING job that waits in the idle queue.  Deferred jobs do not:
#: they wait out DEFERTIME first (released by the job checker or the iteration).
IDLE_MAUI_STATES = (MauiJobState.IDLE,)


class NodeState(str, Enum):
    """Maui's node states; UNKNOWN is what a node whose heartbeat expired shows."""

    IDLE = "Idle"
    BUSY = "Busy"
    RUNNING = "Running"
    DRAINED = "Drained"
    DOWN = "Down"
    UNKNOWN = "Unknown"


#: node states on which new work may be placed (the Maui core's rule; here so that
#: what only compares states, e.g. the operator commands' plan digest, need not load it)
USABLE_STATES = frozenset({NodeState.IDLE, NodeState.BUSY, NodeState.RUNNING})


class SubjobStartType(str, Enum):
    """DUROC subjobStartType."""

    STRICT_BARRIER = "strict-barrier"
    LOOSE_BARRIER = "loose-barrier"
    NO_BARRIER = "no-barrier"


class SubjobCommsType(str, Enum):
    """DUROC subjobCommsType."""

    BLOCKING_JOIN = "blocking-join"
    INDEPENDENT = "independent"
