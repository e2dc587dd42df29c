"""The idle queue of a live iteration, kept between iterations like Maui's job table.

Every iteration that can start something reads the RM's whole idle queue, and with
hundreds of jobs waiting, decoding their rows and building their core jobs cost
as much as the scheduling itself (bench_gram).  Job rows carry an optimistic-lock
``version`` that every change bumps (ORM flushes and the Core writers alike), so
each iteration reads only ``(id, version)`` of the queue, in queue order, and
builds core jobs only for rows it has not seen at that version.  The core never
changes a :class:`~grid_tasks.maui.Job` it is given, so a cached one is reused as is.
Ids and versions start again in a database created anew under the same URL (tests
do that): the RM row's creation time, read along, tells such a database apart.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, select

from grid_tasks.db.models import Job as JobRow
from grid_tasks.db.models import ResourceManager
from grid_tasks.maui import Job
from grid_tasks.scheduling.job_rows import IDLE_COLUMNS, IDLE_MAUI_STATES, ORDER, core_job
from grid_tasks.states import JobState

#: Rows read per query when many jobs are new (bounded IN lists).
CHUNK = 500

# Built once, so their cache keys are memoized (building them per iteration cost more).
_QUEUE = select(JobRow.id, JobRow.version).where(
    JobRow.rm == bindparam("rm"), JobRow.state == JobState.PENDING,
    JobRow.maui_state.in_(IDLE_MAUI_STATES)).order_by(*ORDER)
_ROWS = select(*IDLE_COLUMNS).where(JobRow.id.in_(bindparam("ids", expanding=True)))

_known: dict[tuple[str, str], tuple[Any, dict[int, tuple[int, Job]]]] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class QueueSnapshot:
    """The ``(id, version)`` rows of one RM's idle queue, in queue order, as read at
    one moment (:func:`read_queue`), and the incarnation of the database they are from."""

    key: tuple[str, str]
    created: Any
    rows: list[tuple[int, int]]


def read_queue(session: Any, rm: str) -> QueueSnapshot:
    """Read ``rm``'s idle queue, ids and versions only (cheap even when long)."""
    # (the iteration has the RM's row in the session already: no query then)
    row = session.get(ResourceManager, rm)
    created = None if row is None else row.created_at
    rows = [(int(i), int(v)) for i, v in session.connection().execute(_QUEUE, {"rm": rm})]
    return QueueSnapshot((str(session.get_bind().url), rm), created, rows)


def idle_core_jobs(session: Any, rm: str, queue: QueueSnapshot | None = None) -> list[Job]:
    """The core jobs of ``rm``'s idle queue (as ``queue`` read it, else read now) in
    queue order (priority, submission, id); those unchanged since an earlier call (same
    id and version) are not read again."""
    queue = read_queue(session, rm) if queue is None else queue
    with _lock:
        incarnation, known = _known.get(queue.key, (None, {}))
    if incarnation != queue.created:
        known = {}
    stale = [job_id for job_id, version in queue.rows
             if known.get(job_id, (None,))[0] != version]
    fresh: dict[int, Job] = {}
    for start in range(0, len(stale), CHUNK):
        for row in session.connection().execute(_ROWS, {"ids": stale[start:start + CHUNK]}):
            fresh[row.id] = core_job(row)
    kept: dict[int, tuple[int, Job]] = {}
    for job_id, version in queue.rows:
        if job_id in fresh:
            kept[job_id] = (version, fresh[job_id])
        elif job_id in known and known[job_id][0] == version:
            kept[job_id] = known[job_id]
        # else: gone between the two reads (started, cancelled): not idle any more
    with _lock:
        _known[queue.key] = (queue.created, kept)  # jobs no longer idle are forgotten
    return [job for _, job in kept.values()]
