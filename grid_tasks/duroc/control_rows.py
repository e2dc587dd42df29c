"""Helpers of the DUROC control side: SQL rows, optimistic-lock retries, canvas result
detaching and the header-delivery log (kept beside the coordination store, not in it,
so it outlives the store's purge at the job's end)."""

from __future__ import annotations

import time
from datetime import datetime
from collections.abc import Callable, Collection
from typing import Any

from sqlalchemy import bindparam, insert, select, update

from grid_tasks.db import ConcurrentUpdateError
from grid_tasks.db.models import CoallocatedJob, Subjob
from grid_tasks.db.models.base import table_row
from grid_tasks.db.repository import get_rm
# re-exported: what both sides of the door check
from grid_tasks.duroc.door import DEFAULT_BARRIER_TIMEOUT_S, labels  # noqa: F401
from grid_tasks.duroc.errors import CoallocFinishedError, CoallocRequestError
from grid_tasks.errors import NotFoundError
from grid_tasks.gram.submission import check_fits
from grid_tasks.states import JobState

#: Seconds a coallocated job may wait for its barrier before it fails (DUROC has none).

#: Per coallocated job: how often each header task was delivered (``<address>:runs``),
#: how often as a redelivery of an unacknowledged message (``<address>:redelivered``:
#: its worker died mid-task) and its task id (``<address>:task``).
DELIVERIES_KEY = "grid_tasks:duroc:deliveries:{}"
DELIVERIES_TTL_S = 24 * 3600
#: Per coallocated job: its processes' runtime URL (their store credentials), kept for
#: the header tasks that submit its subjobs.
URL_KEY = "grid_tasks:duroc:url:{}"


def note_delivery(client: Any, job_id: int, address: int, task_id: str | None,
                  redelivered: bool, queue: Callable[[Any], None] | None = None) -> Any:
    """Count one delivery of the header task watching ``address``; the job's runtime URL
    (None when gone), read in the same round trip: the header's submission needs it.
    ``queue(pipe)`` adds one more command to that round trip: then (URL, its reply),
    an error reply returned rather than raised."""
    key = DELIVERIES_KEY.format(job_id)
    pipe = client.pipeline(transaction=False)
    pipe.get(URL_KEY.format(job_id))
    pipe.hincrby(key, f"{address}:runs", 1)
    if redelivered:
        pipe.hincrby(key, f"{address}:redelivered", 1)
    if task_id:
        pipe.hset(key, f"{address}:task", task_id)
    pipe.expire(key, DELIVERIES_TTL_S)
    if queue is None:
        return pipe.execute()[0]
    queue(pipe)
    replies = pipe.execute(raise_on_error=False)
    for reply in replies[:-1]:
        if isinstance(reply, Exception):
            raise reply
    return replies[0], replies[-1]


def header_deliveries(client: Any, job_id: int) -> dict[int, dict[str, Any]]:
    """Per subjob address: ``runs``, ``redelivered`` and ``task`` (see :data:`DELIVERIES_KEY`)."""
    out: dict[int, dict[str, Any]] = {}
    for field_, value in client.hgetall(DELIVERIES_KEY.format(job_id)).items():
        address, name = field_.decode().split(":", 1)
        entry = out.setdefault(int(address), {"runs": 0, "redelivered": 0, "task": None})
        entry[name] = value.decode() if name == "task" else int(value)
    return out


def retrying(action: Any, attempts: int = 8) -> Any:
    """``action()``, again after a short pause when it lost an optimistic-lock race."""
    for attempt in range(attempts):
        try:
            return action()
        except ConcurrentUpdateError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.02 * (attempt + 1))
    return None


def detach(result: Any) -> None:
    """Forget a sent canvas's result objects: nobody waits on them here, and their
    ``__del__`` would otherwise talk to Redis whenever collected (even after shutdown)."""
    parent = getattr(result, "parent", None)
    for res in [result, *(getattr(parent, "results", None) or [])]:
        if res.backend is not None:
            res.backend.remove_pending_result(res)
            res.backend = None


def coalloc_row(session: Any, job_id: int) -> CoallocatedJob:
    row = session.get(CoallocatedJob, job_id)
    if row is None:
        raise NotFoundError(f"no coallocated job {job_id}")
    return row


# Built once, like the statements below: building this join anew costs each header
# several times what running it does (~0.4 ms against ~0.1 ms, SQLite).
_FACTS = select(Subjob.gram_job_id, Subjob.rsl, Subjob.rm, Subjob.label,
                CoallocatedJob.owner, CoallocatedJob.barrier_timeout).join(
    CoallocatedJob, CoallocatedJob.id == Subjob.coallocation_id).where(
    Subjob.coallocation_id == bindparam("job"), Subjob.position == bindparam("address"))


def submission_facts(session: Any, job_id: int, address: int) -> Any:
    """What submitting subjob ``address`` needs, in one query: its ``gram_job_id``,
    ``rsl``, ``rm``, ``label`` and its job's ``owner`` and ``barrier_timeout``."""
    found = session.connection().execute(_FACTS, {"job": job_id, "address": address}).first()
    if found is None:
        raise CoallocFinishedError(f"coallocated job {job_id} has no subjob {address} any more")
    return found


def _subjob_values(job_id: int, address: int, label: str, sub: Any) -> dict[str, Any]:
    return {"coallocation_id": job_id, "position": address, "label": label,
            "rm": sub.rm_contact, "rsl": sub.gram_rsl(), "start_type": sub.start_type,
            "comms_type": sub.comms_type, "state": JobState.UNSUBMITTED}


def new_subjob_row(job_id: int, address: int, label: str, sub: Any) -> Subjob:
    return Subjob(**_subjob_values(job_id, address, label, sub))


# Built once: every request and every header's submission runs them (Core, no flush).
_INSERT_COALLOC = insert(CoallocatedJob.__table__)
_COALLOC_CONTACT = update(CoallocatedJob.__table__).where(
    CoallocatedJob.__table__.c.id == bindparam("b_id"))
_INSERT_SUBJOBS = insert(Subjob.__table__)
_LIVE = select(CoallocatedJob.__table__.c.id).where(
    CoallocatedJob.__table__.c.id == bindparam("b_job"),
    CoallocatedJob.__table__.c.state.notin_([JobState.DONE, JobState.FAILED])).scalar_subquery()
# Linking is fenced by the job's state: a subjob's GRAM job stored after its job ended
# (say, its coordination state was lost while the header was on its way) is rolled
# back with the link, so the scheduler never sees it.
_LINK = update(Subjob.__table__).where(
    Subjob.__table__.c.coallocation_id == bindparam("b_job"),
    Subjob.__table__.c.position == bindparam("b_address"),
    Subjob.__table__.c.coallocation_id == _LIVE)
_LINKED = select(Subjob.gram_job_id).where(Subjob.coallocation_id == bindparam("job"),
                                           Subjob.gram_job_id.is_not(None))


def insert_coallocation(session: Any, rsl: str, owner: str, barrier_timeout: float,
                        subs: list[Any], labels: list[str], deadline: datetime) -> int:
    """Insert a coallocated job (PENDING, with its contact and barrier ``deadline``) and
    one row per subjob, as plain INSERTs: every request pays for this; its id."""
    conn = session.connection()
    job_id = conn.execute(_INSERT_COALLOC, table_row(CoallocatedJob.__mapper__, {
        "rsl": rsl, "owner": owner, "state": JobState.PENDING,
        "barrier_timeout": float(barrier_timeout), "barrier_deadline": deadline,
        "version": 1})).inserted_primary_key[0]
    conn.execute(_COALLOC_CONTACT, {"b_id": job_id, "contact": f"duroc://coalloc/{job_id}"})
    conn.execute(_INSERT_SUBJOBS, [
        table_row(Subjob.__mapper__, _subjob_values(job_id, address, label, sub))
        for address, (sub, label) in enumerate(zip(subs, labels))])
    return int(job_id)


def link_subjob(session: Any, job_id: int, address: int, gram_id: int) -> None:
    """Record subjob ``address``'s GRAM job (PENDING); CoallocFinishedError if the
    subjob is gone (deleted meanwhile) or its job has ended."""
    done = session.connection().execute(_LINK, {
        "b_job": job_id, "b_address": address, "gram_job_id": gram_id,
        "state": JobState.PENDING}).rowcount
    if done != 1:
        raise CoallocFinishedError(f"coallocated job {job_id} has no subjob {address} any "
                                   "more, or has ended")


def linked_gram_jobs(session: Any, job_id: int) -> list[int]:
    """The GRAM job ids of the job's subjobs, as committed now."""
    return [int(g) for g in session.connection().execute(_LINKED, {"job": job_id}).scalars()]


def check_rms(session: Any, subs: list[Any], slurm_rms: Collection[str] = ()) -> None:
    """Every component names a known RM that can hold it (before anything is stored).
    A Slurm RM's (``slurm_rms``) fit is Slurm's to judge: its gatekeeper refuses at
    submission what the partition can never hold."""
    for sub in subs:
        if not sub.rm_contact:
            raise CoallocRequestError(
                f"subjob {sub.label or sub.index}: every component of a coallocated job needs "
                "a resourceManagerContact")
        if sub.rm_contact in slurm_rms:
            get_rm(session, sub.rm_contact)  # known to the grid (NotFoundError names them)
        else:
            check_fits(session, sub.rm_contact, sub)  # also names an unknown RM
