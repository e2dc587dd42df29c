"""A Slurm cluster behind the one RM interface: estimate, reserve and release for the broker.

* **estimate** - ``sbatch --test-only`` (about 5 ms; it uses up a job id): one start,
  never before ``not_before``, on the partition as a whole (Slurm picks the nodes when
  the job starts, so the allocation is ``{partition: procs}``, the key the broker's
  token store claims on); a request the partition can never hold is ``[]`` (never);
* **reserve** - ``scontrol create reservation`` for the mapped user, named
  ``gt-<rm>-<name>`` (:mod:`grid_tasks.slurm.reservations`), over the whole walltime in
  whole minutes, ``FLEX`` when the job may start early; the same confirmed SQL row of
  kind ``grid`` as a native RM stores, written first in the same transaction, so a
  refusal by Slurm leaves nothing and the broker's bookkeeping (tokens, mark_enacted,
  restore) is the native one.  Idempotent per ``(rm, name, token)``;
* **release** - ``scontrol delete reservation``; Slurm refuses while a job runs in it
  (:class:`~grid_tasks.slurm.errors.ReservationInUse`), or may be down, so the row is
  then marked and :meth:`SlurmRM.prune` deletes both as soon as it can;
* **prune** - deletes reservations whose job ended, that ended, were released while in
  use, or whose broker died before confirming its tokens, and Slurm reservations of this
  RM's prefix that no row knows (a transaction that failed after Slurm made one).

The error of the estimate against the real start is recorded on the row by
:meth:`SlurmRM.record_start` (the job path calls it once the job runs).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import pwd
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from grid_tasks.db import Reservation, ReservationKind, repository
from grid_tasks.db.models import Job as JobRow
from grid_tasks.gram.binding import unbind
from grid_tasks.legion.refusals import ReservationRefused
from grid_tasks.scheduling.rm_backend import Forget, RMBackend
from grid_tasks.scheduling.rm_service import (Ask, begin_reserve, check_text, count, describe,
                                              find_grid_reservation, lock_rm, number)
from grid_tasks.slurm import SlurmClient
from grid_tasks.slurm.errors import ReservationInUse, SlurmError, SlurmRefused, SlurmUnavailable
from grid_tasks.slurm.reservations import flags, listed_names, rm_prefix, slurm_name, window
from grid_tasks.slurm.translate import minutes
from grid_tasks.states import JobState
from grid_tasks.topology import RMKind, ResourceManagerSpec
from grid_tasks.utc import epoch, from_epoch

log = logging.getLogger(__name__)

#: The allocation key of a Slurm RM whose topology names no partition (Slurm's default).
DEFAULT_PARTITION = "default"
#: A row whose broker never confirmed its token is kept this long (as a native RM does).
UNCONFIRMED_GRACE_S = 60.0
_GONE = "requested reservation is invalid"  # scontrol's answer for an unknown name


def service_account() -> str:
    """This worker's own account: Slurm jobs of a grid without a grid map run as it."""
    return pwd.getpwuid(os.geteuid()).pw_name


class SlurmRM(RMBackend):
    """One Slurm cluster (its ``slurm.conf``) and partition as a grid resource manager."""

    kind = RMKind.SLURM

    def __init__(self, rm: str, client: SlurmClient, *, account: str | None = None) -> None:
        super().__init__(rm)
        self.client = client
        self.account = account or service_account()
        self.key = client.partition or DEFAULT_PARTITION

    @classmethod
    def for_spec(cls, spec: ResourceManagerSpec) -> "SlurmRM":
        assert spec.slurm is not None  # the topology gives every Slurm RM its spec
        return cls(spec.name, SlurmClient(str(spec.slurm.slurm_conf), spec.slurm.partition))

    def _refusal(self, what: str, exc: SlurmError) -> ReservationRefused:
        reason = "unavailable" if isinstance(exc, SlurmUnavailable) else "busy"
        return ReservationRefused(f"{what} on {self.rm} (Slurm): {exc}", reason)

    # -- estimate -------------------------------------------------------------------------
    def estimate(self, session: Session, *, procs: int, duration: float, not_before: float,
                 now: float, limit: int = 3,
                 requester: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        procs, _ = count("procs", procs), count("limit", limit)
        seconds = math.ceil(number("duration", duration))
        t0 = max(float(now), number("not_before", not_before, positive=False))
        repository.get_rm(session, self.rm)  # NotFoundError for an unknown RM, as natively
        try:
            found = self.client.estimate(procs, seconds)
        except SlurmRefused as exc:
            if exc.code == "NO_RESOURCES":  # more than the partition will ever hold
                return []
            raise self._refusal("estimate", exc) from None
        except SlurmError as exc:
            raise self._refusal("estimate", exc) from None
        slurm_start = found.start.timestamp()
        return [{"time": max(t0, slurm_start), "allocation": {self.key: procs},
                 "slurm_start": slurm_start}]

    # -- reserve / release ------------------------------------------------------------------
    def reserve(self, session: Session, *, name: str, allocation: Mapping[str, int],
                start: float, duration: float, token: str, job_key: str, now: float,
                label: str | None = None, allow_early: bool = False,
                requester: Mapping[str, Any] | None = None,
                account: str | None = None) -> dict[str, Any]:
        ask = Ask.check(self.rm, name=name, allocation=allocation, start=start,
                        duration=duration, token=token, job_key=job_key, label=label,
                        allow_early=allow_early, requester=requester)
        if set(ask.allocation) != {self.key}:
            raise ReservationRefused(
                f"grid reservation {name} on {self.rm}: a Slurm RM is reserved as a whole "
                f"partition, {{{self.key!r}: procs}}, got {dict(ask.allocation)!r}", "bad_request")
        again = begin_reserve(session, ask, now)
        if again is not None:
            return again
        win = window(ask.start, ask.end, now)
        user = account or self.account
        held = {"reservation": slurm_name(self.rm, name), "user": user,
                "flags": list(flags(ask.allow_early)), "start": win.start,
                "minutes": minutes(win.seconds), "planned_start": ask.start}
        row = ask.row(slurm=held)
        session.add(row)
        session.flush()  # the row first: Slurm's refusal below rolls it back
        self._create(held["reservation"], win, sum(ask.allocation.values()), user,
                     flags(ask.allow_early))
        return describe(row)

    def _create(self, sname: str, win: Any, procs: int, user: str,
                extra: tuple[str, ...]) -> None:
        """Make the Slurm reservation; one left by a transaction that failed after
        making it (same name, no row) is replaced."""
        for attempt in (1, 2):
            try:
                self.client.reserve(sname, from_epoch(win.start), win.seconds, procs, user, extra)
                return
            except SlurmRefused as exc:
                if attempt == 1 and "duplicate reservation name" in str(exc).lower():
                    self._delete(sname)
                    continue
                raise self._refusal(f"reservation {sname}", exc) from None
            except SlurmError as exc:
                raise self._refusal(f"reservation {sname}", exc) from None

    def release(self, session: Session, *, name: str, token: str | None = None,
                now: float | None = None, forget: Forget | None = None) -> bool:
        check_text("reservation name", name)
        repository.get_rm(session, self.rm)
        row = find_grid_reservation(session, self.rm, name)
        if row is None or (token is not None and row.token != token):
            return False
        if row.kind is not ReservationKind.GRID:
            raise ReservationRefused(f"reservation {name!r} on {self.rm} is a {row.kind.value} "
                                     "reservation; only grid reservations are released here",
                                     "not_grid")
        unbind(session, row, "grid reservation released by the broker", now)
        if forget is not None:
            forget(row)
        self._drop(session, row)
        return True

    def _drop(self, session: Session, row: Reservation, forget: Forget | None = None) -> bool:
        """Delete the Slurm reservation and then the row (``forget(row)`` first: its
        tokens go with it); when Slurm cannot yet (a job runs in it, or slurmctld is
        down) mark the row for :meth:`prune`.  True if gone."""
        if not self._delete(slurm_of(row)["reservation"]):
            if not slurm_of(row).get("release_pending"):
                row.resources = {**row.resources, "slurm": {**slurm_of(row),
                                                            "release_pending": True}}
                session.flush()
            return False
        if forget is not None:
            forget(row)
        session.delete(row)
        session.flush()
        return True

    def _delete(self, sname: str) -> bool:
        """Delete Slurm reservation ``sname``; True when it is gone (or never was)."""
        try:
            self.client.release(sname)
        except ReservationInUse:
            return False
        except SlurmRefused as exc:
            if _GONE in str(exc).lower():
                return True
            log.warning("Slurm reservation %s not deleted yet: %s", sname, exc)
            return False
        except SlurmError as exc:
            log.warning("Slurm reservation %s not deleted yet: %s", sname, exc)
            return False
        return True

    def capacities(self, session: Session) -> dict[str, int]:
        try:
            _idle, total = self.client.capacity()
        except SlurmError as exc:
            raise self._refusal("capacity", exc) from None
        return {self.key: total}

    # -- housekeeping -------------------------------------------------------------------------
    def prune(self, session: Session, now: float,
              held: Callable[[Reservation], bool] | None = None,
              forget: Forget | None = None) -> list[str]:
        """Delete what should not be held any more (see the module docstring); ``held``
        tells whether a row's token is still in the token store (None: not known, so
        no row is pruned for its token); ``forget(row)`` releases a deleted row's
        tokens (a co-reserved job that ended early frees its slot for brokers at once)."""
        lock_rm(session, self.rm)  # a reserve in flight has its row before its Slurm one
        rows = list(session.scalars(select(Reservation).where(
            Reservation.rm == self.rm, Reservation.kind == ReservationKind.GRID)))
        done = [row.name for row in rows
                if self._finished(session, row, now, held) and self._drop(session, row, forget)]
        try:
            listed = listed_names(self.client.run("scontrol", "-o", "show", "reservation",
                                                  what="reservations").stdout)
        except SlurmError as exc:
            log.warning("reservations of %s not listed: %s", self.rm, exc)
            return done
        known = {slurm_of(row).get("reservation") for row in rows}
        for orphan in listed:
            if orphan.startswith(rm_prefix(self.rm)) and orphan not in known \
                    and self._delete(orphan):
                done.append(orphan)
        return done

    @staticmethod
    def _finished(session: Session, row: Reservation, now: float,
                  held: Callable[[Reservation], bool] | None) -> bool:
        if slurm_of(row).get("release_pending") or epoch(row.end_time) <= now:
            return True
        if row.owner_job_id is not None:
            job = session.get(JobRow, row.owner_job_id)
            return job is None or JobState(job.state).terminal
        made = epoch(row.created_at) if row.created_at is not None else now
        return now - made > UNCONFIRMED_GRACE_S and held is not None and not held(row)

    def record_start(self, session: Session, name: str, started: float) -> float | None:
        """The job of grid reservation ``name`` started at ``started``: record it and the
        estimate's error (seconds late; negative: early); None if the row is gone."""
        row = find_grid_reservation(session, self.rm, name)
        if row is None:
            return None
        error = float(started) - float(slurm_of(row).get("planned_start", epoch(row.start_time)))
        row.resources = {**row.resources, "slurm": {**slurm_of(row), "started": float(started),
                                                    "estimate_error_s": error}}
        session.flush()
        return error

    # -- the job side ---------------------------------------------------------------------------
    def submit(self, job: Any, *, account: str | None = None,
               reservation: str | None = None) -> str:
        if reservation is not None:
            job = dataclasses.replace(job, options=(
                *job.options, f"--reservation={slurm_name(self.rm, reservation)}"))
        return str(self.client.submit(job, user=account))

    def cancel(self, native_id: str, *, account: str | None = None) -> None:
        self.client.cancel(int(native_id), user=account)

    def states(self, native_ids: Iterable[str]) -> dict[str, Any]:
        return {str(k): v for k, v in self.client.jobs(int(i) for i in native_ids).items()}


def slurm_of(row: Reservation) -> dict[str, Any]:
    """What a Slurm RM keeps on a grid reservation's row (its Slurm name, user, ...)."""
    return dict((row.resources or {}).get("slurm") or {})
