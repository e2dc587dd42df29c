"""A durable cancel of a Slurm RM's job, asked where Slurm's commands may not be.

``scancel`` runs where the RM's gatekeeper runs (its host has Slurm's client commands).
A caller elsewhere - the scheduler's DUROC settle cancelling a coallocated job's Slurm
subjob, or deleting one before release - must neither wait on that gatekeeper nor lose
the cancel when it is down.  So it records the intent on the job's row, in SQL (the
``cancel`` entry of the row's Slurm particulars: who asked, when), marks the cancel in
Redis and wakes the RM's follower (:mod:`grid_tasks.scheduling.slurm_follow`), the one
writer of the job's state.  Every pass of the follower ``scancel``s each open job with
an intent, as the job's account, until Slurm reports it ended, and records that end as
the user's cancel.  A gatekeeper that is down meanwhile applies it with its follower's
first pass once it is back; the caller is told at once whether a follower is alive now
(:attr:`CancelRequested.note`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from grid_tasks.db import session_scope
from grid_tasks.db.errors import ConcurrentUpdateError
from grid_tasks.db.models import Job as JobRow
from grid_tasks.gram.keys import CANCEL_TTL_S, cancel_key
from grid_tasks.scheduling.slurm_jobs import CANCEL, SLURM, WAKE_TTL_S, lease_key, wake_key
from grid_tasks.services import Services
from grid_tasks.states import JobState

log = logging.getLogger(__name__)

#: Tries of the intent's write when a concurrent writer (the follower) bumps the row.
ATTEMPTS = 8


@dataclass(frozen=True)
class CancelRequested:
    """A recorded cancel of GRAM job ``job_id`` on Slurm RM ``rm``; ``followed``: a
    follower of the RM (its gatekeeper) held its lease when the cancel was recorded."""

    job_id: int
    rm: str
    followed: bool

    @property
    def note(self) -> str:
        """What the caller is told."""
        if self.followed:
            return (f"GRAM job {self.job_id} on {self.rm}: cancel requested; the RM's "
                    "gatekeeper stops it now")
        return (f"GRAM job {self.job_id} on {self.rm}: cancel requested; the RM's gatekeeper "
                "is unreachable, it will be retried until the gatekeeper answers")


def request_cancel(services: Services, job_id: int, by: str | None) -> CancelRequested | None:
    """Record the cancel of ``job_id`` (asked by ``by``) for its RM's follower; None when
    the job has ended already or never reached Slurm (nothing to stop there)."""
    rm = _record(services, int(job_id), by)
    if rm is None:
        return None
    return CancelRequested(int(job_id), rm, _wake(services, int(job_id), rm))


def _record(services: Services, job_id: int, by: str | None) -> str | None:
    """Write the intent (once; a repeated cancel keeps the first); the job's RM."""
    for attempt in range(ATTEMPTS):
        try:
            with session_scope(services.sessions) as session:
                row = session.get(JobRow, job_id)
                if row is None or JobState(row.state).terminal:
                    return None
                info = (row.request or {}).get(SLURM)
                if not isinstance(info, dict):
                    return None
                if CANCEL not in info:
                    asked = {"by": by, "at": services.clock.now().isoformat()}
                    row.request = {**(row.request or {}), SLURM: {**info, CANCEL: asked}}
                return str(row.rm)
        except ConcurrentUpdateError:
            if attempt == ATTEMPTS - 1:
                raise
    return None


def _wake(services: Services, job_id: int, rm: str) -> bool:
    """Mark the cancel (the job's end then reads as the user's) and wake the RM's
    follower; whether one holds its lease.  Redis away: the follower still finds the
    intent in SQL on its next pass, so this only logs (and says none is known)."""
    try:
        pipe = services.redis.pipeline(transaction=False)
        pipe.set(cancel_key(job_id), 1, ex=CANCEL_TTL_S)
        pipe.rpush(wake_key(rm), job_id)
        pipe.expire(wake_key(rm), WAKE_TTL_S)
        pipe.exists(lease_key(rm))
        replies: list[Any] = pipe.execute()
    except Exception as exc:  # noqa: BLE001 - the SQL intent is what counts
        log.warning("cancel of job %s on %s recorded, but its follower not woken: %s",
                    job_id, rm, exc)
        return False
    return bool(replies[-1])
