"""One interface for the resource manager's side of the metascheduler protocol (seed 002).

The broker asks every RM the same questions by task name (:mod:`grid_tasks.broker.remote`);
the RM's scheduler worker answers them through an :class:`RMBackend` chosen once per RM
from the topology's ``kind`` (:mod:`grid_tasks.scheduling.rm_kinds`, a small factory in
the style of flux-sched's resource-manager plug-ins):

* the native Maui RM (:class:`~grid_tasks.scheduling.native_rm.NativeRM`): its core
  loaded from SQL answers estimates and checks reservations node by node;
* a Slurm cluster (:class:`~grid_tasks.scheduling.slurm_rm.SlurmRM`): ``sbatch
  --test-only`` answers estimates, ``scontrol create reservation`` holds the slot.

Both keep the grid's bookkeeping in one place, a confirmed SQL reservation of kind
``grid`` per grid reservation carrying the broker's token, so tokens, ``mark_enacted``
and the token store's restore after a Redis loss work the same whatever the RM.

The job side (submit into a reservation, cancel, state) belongs to the same interface;
a native RM's jobs go through its GRAM job managers and node daemons instead, so there
those calls are refused with :class:`NotOnThisRM`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

from sqlalchemy.orm import Session

from grid_tasks.db import Reservation
from grid_tasks.errors import GridTasksError
from grid_tasks.scheduling import rm_service
from grid_tasks.topology import RMKind

Forget = Callable[[Reservation], None]


class NotOnThisRM(GridTasksError):
    """A call this kind of resource manager does not answer (says which and why)."""


class RMBackend(ABC):
    """The RM side of the metascheduler protocol, for one resource manager ``rm``.

    Every call takes the caller's session (one transaction: the grid reservation's SQL
    row and the RM's own action succeed or fail together) and ``now`` (POSIX seconds;
    the clock is read by the task, never here)."""

    kind: ClassVar[RMKind]

    def __init__(self, rm: str) -> None:
        self.rm = rm

    # -- estimate and reserve (seed 002, 3.3) -----------------------------------------
    @abstractmethod
    def estimate(self, session: Session, *, procs: int, duration: float, not_before: float,
                 now: float, limit: int = 3,
                 requester: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Possible starts at or after ``max(now, not_before)``, earliest first:
        ``[{"time": epoch, "allocation": {node: procs}}]``; ``[]`` means never."""

    @abstractmethod
    def reserve(self, session: Session, *, name: str, allocation: Mapping[str, int],
                start: float, duration: float, token: str, job_key: str, now: float,
                label: str | None = None, allow_early: bool = False,
                requester: Mapping[str, Any] | None = None,
                account: str | None = None) -> dict[str, Any]:
        """Hold ``allocation`` over ``[start, start + duration)`` for one grid job, for
        the local ``account`` the submitter maps to; idempotent per ``(rm, name,
        token)``.  :class:`~grid_tasks.legion.refusals.ReservationRefused` says why not."""

    @abstractmethod
    def release(self, session: Session, *, name: str, token: str | None = None,
                now: float | None = None, forget: Forget | None = None) -> bool:
        """Give up grid reservation ``name`` (only with ``token``, when given); True if
        it was held."""

    @abstractmethod
    def capacities(self, session: Session) -> dict[str, int]:
        """Processors per allocation key (``{node: procs}``): what the broker's token
        store needs to check claims on this RM."""

    def prune(self, session: Session, now: float,
              held: Callable[[Reservation], bool] | None = None,
              forget: Forget | None = None) -> list[str]:
        """Finish what the RM could not do at once (e.g. delete a reservation its job
        still ran in) and drop reservations whose token ``held`` says is gone or whose
        job ended, with ``forget(row)`` (their tokens) for each; the names dealt with.
        A native RM's iteration prunes its own (nothing to do here)."""
        return []

    def mark_enacted(self, session: Session, parts: Iterable[tuple[str, str]]) -> int:
        """The broker confirmed these ``(name, token)`` parts' tokens: mark them enacted
        (grid bookkeeping in SQL, the same for every kind); how many are marked."""
        return rm_service.mark_enacted(session, [(self.rm, str(name), str(token))
                                                 for name, token in parts])

    # -- the job side -------------------------------------------------------------------
    def submit(self, job: Any, *, account: str | None = None,
               reservation: str | None = None) -> str:
        """Submit ``job`` as ``account`` (into grid reservation ``reservation``); the
        RM's own job id."""
        raise self._not_here("submit")

    def cancel(self, native_id: str, *, account: str | None = None) -> None:
        """Cancel the RM's job ``native_id`` as ``account``."""
        raise self._not_here("cancel")

    def states(self, native_ids: Iterable[str]) -> dict[str, Any]:
        """The RM's view of its jobs ``native_ids`` that it still knows."""
        raise self._not_here("state")

    def _not_here(self, what: str) -> NotOnThisRM:
        return NotOnThisRM(f"{what} on resource manager {self.rm} ({self.kind.value}): its "
                           "jobs go through their GRAM job managers, not this interface")
