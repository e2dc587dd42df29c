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


class NodeState(str, Enum):
    """Maui's node states; UNKNOWN is what a node whose heartbeat expired shows."""

    IDLE = "Idle"
    BUSY = "Busy"
    RUNNING = "Running"
    DRAINED = "Drained"
    DOWN = "Down"
    UNKNOWN = "Unknown"


class SubjobStartType(str, Enum):
    """DUROC subjobStartType."""

    STRICT_BARRIER = "strict-barrier"
    LOOSE_BARRIER = "loose-barrier"
    NO_BARRIER = "no-barrier"


class SubjobCommsType(str, Enum):
    """DUROC subjobCommsType."""

    BLOCKING_JOIN = "blocking-join"
    INDEPENDENT = "independent"
