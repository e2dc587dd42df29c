"""The Maui scheduling core (pure: no Celery, Redis, SQL, clock or I/O).

Public API: :class:`Scheduler`, :class:`SchedulerConfig` and the data model.

Semantics worth knowing:

* Intervals are half-open ``[start, start + walltime)``: a job whose walltime is over
  holds nothing any more, even before ``job_ended`` reports it.
* ``SchedulerConfig.preset("easy")`` is RESERVATIONDEPTH 1 and ``"conservative"`` is
  RESERVATIONDEPTH unlimited, both with RESERVATIONPOLICY HIGHEST: a job keeps its
  reservation until it starts, and after resources were freed every reservation is, in
  priority order, moved to its earliest start (never later).  That is exactly how the
  reference simulator (pyss) re-places its jobs; CURRENTHIGHEST, which rebuilds all
  reservations from scratch each iteration, gives different (sometimes earlier) starts
  for conservative.  ``"fcfs"`` is depth 0 without backfill.
* A single node with processors-only jobs and submission-order priority runs on the
  pool fast path; anything else (another resource, an admin reservation, a node update,
  fairshare, throttling) moves the state to the general engine once, with identical
  decisions.
* RESERVATIONPOLICY/DEPTH, BACKFILLPOLICY and NODEAVAILABILITYPOLICY are small objects
  (:mod:`grid_tasks.maui.policies`) chosen once when a scheduler is built.
* Scheduler modules (MODULES) are observers: the core never calls them; the shell
  calls an :class:`Observers` with each iteration's result after the core returned.
* Administrative reservations hold processors only (not memory, disk or swap).
  RESOURCEAVAILABILITYPOLICY UTILIZED counts like COMBINED, since ignoring dedicated
  resources would overcommit nodes (DESIGN invariant 1).
"""

from grid_tasks.maui.config import (
    AvailabilityPolicy, BackfillPolicy, FairsharePolicy, FSTarget, ReservationPolicy, SchedulerConfig,
    UnknownPolicyError,
)
from grid_tasks.maui.model import (
    ACL, IterationResult, Job, Node, PriorityBreakdown, Reservation, ReservationKind,
    ReservationRefused, SchedulerError, Start, StartEstimate, Window,
)
from grid_tasks.maui.modules import MODULES, Observers, SchedModule, register_module
from grid_tasks.maui.scheduler import Scheduler

__all__ = [
    "ACL", "AvailabilityPolicy", "BackfillPolicy", "FSTarget", "FairsharePolicy", "IterationResult",
    "Job", "MODULES", "Node", "Observers", "PriorityBreakdown", "Reservation", "ReservationKind",
    "ReservationPolicy", "ReservationRefused", "SchedModule", "Scheduler", "SchedulerConfig",
    "SchedulerError", "Start", "StartEstimate", "UnknownPolicyError", "Window", "register_module",
]
