"""The SQL models of grid_tasks: import from here (or from :mod:`grid_tasks.db`)."""

from .accounting import AccountingRecord
from .base import NAMING_CONVENTION, Base, EnumText, UTCDateTime
from .fences import Fence
from .jobs import BarrierState, CoallocatedJob, Job, JobStateHistory, Subjob
from .queue_changes import IdleQueueChanges, IdleQueueLog, NodeChanges
from .reservations import ACL_KEYS, Reservation, ReservationKind
from .resources import Node, ResourceManager

__all__ = [
    "ACL_KEYS",
    "AccountingRecord",
    "BarrierState",
    "Base",
    "CoallocatedJob",
    "EnumText",
    "Fence",
    "IdleQueueChanges",
    "IdleQueueLog",
    "Job",
    "JobStateHistory",
    "NAMING_CONVENTION",
    "Node",
    "NodeChanges",
    "Reservation",
    "ReservationKind",
    "ResourceManager",
    "Subjob",
    "UTCDateTime",
]
