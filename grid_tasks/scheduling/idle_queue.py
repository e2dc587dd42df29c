"""The idle queue of a live iteration, kept between iterations like Maui's job table.

Every iteration that can start something needs the RM's whole idle queue as core
jobs, and with 100,000 jobs waiting, reading their rows and building their jobs cost
seconds.  So a process keeps each RM's queue (:class:`QueueImage`: the ``(id,
version)`` rows in queue order, the core jobs built from them, and the core's derived
facts, :class:`~grid_tasks.maui.queue_cache.QueueCache`) and reads only what changed:

* the RM's idle-queue change counter (:class:`~grid_tasks.db.models.IdleQueueChanges`,
  kept by triggers on ``jobs`` in every writer's transaction) is read first: while it
  is the image's, no row entered, left or changed in the queue, and nothing more is
  read;
* else the change log (:class:`~grid_tasks.db.models.IdleQueueLog`, written by the
  same triggers) names the jobs of the counts since the image's; only those rows are
  read and merged into the image in queue order (the core never changes a
  :class:`~grid_tasks.maui.Job` it is given, so the others are reused as they are);
* the whole queue is read column-wise (:mod:`~grid_tasks.scheduling.idle_load`) when
  there is no image yet, when many jobs changed, or when the log was pruned past the
  image's count.

(A write committed between the counter's read and the rows' makes the image newer
than its counter: the next read only reads that job again.)  Ids and versions start
again in a database created anew under the same URL (tests do that): the RM row's
creation time, read along, tells such a database apart.  An image read inside a
transaction that wrote jobs itself is valid only if that transaction commits: its
writer calls :func:`forget` when it rolls back.
"""

from __future__ import annotations

import dataclasses
import threading
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np
from sqlalchemy import bindparam, select

from grid_tasks.db.models import IdleQueueChanges, IdleQueueLog
from grid_tasks.db.models import Job as JobRow
from grid_tasks.db.models import ResourceManager
from grid_tasks.gc_pause import collector_paused
from grid_tasks.maui import Job
from grid_tasks.maui.queue_cache import QueueCache
from grid_tasks.scheduling.idle_load import CHUNK, QueueColumns, read_all, read_rows
from grid_tasks.scheduling.job_rows import (
    IDLE_COLUMNS, IDLE_MAUI_STATES, ORDER, core_job,
)
from grid_tasks.scheduling.queue_arrays import flat_of, gather, kept_at, merged, pairs_of
from grid_tasks.states import JobState

#: ``(id, version)`` rows fetched from the driver at a time.
FETCH = 10_000
#: At most this many changed jobs (or a tenth of the queue) are merged into the kept
#: queue in memory; more, and the whole queue is read again.
MERGE_MAX = 5_000

# Built once, so their cache keys are memoized (building them per iteration cost more).
_QUEUE = select(JobRow.id, JobRow.version).where(
    JobRow.rm == bindparam("rm"), JobRow.state == JobState.PENDING,
    JobRow.maui_state.in_(IDLE_MAUI_STATES)).order_by(*ORDER)
_ROWS = select(*IDLE_COLUMNS, JobRow.priority.label("queue_priority")).where(
    JobRow.id.in_(bindparam("ids", expanding=True)))
_CHANGES = select(IdleQueueChanges.changes).where(IdleQueueChanges.rm == bindparam("rm"))
_LOGGED = select(IdleQueueLog.job_id).where(
    IdleQueueLog.rm == bindparam("rm"), IdleQueueLog.seq > bindparam("since"),
    IdleQueueLog.seq <= bindparam("upto"))


@dataclass
class QueueImage:
    """What this process keeps of one RM's idle queue between iterations: the
    ``(id, version)`` rows last read (flat, in queue order), the core jobs built from
    them in that order, and the core's derived facts about them
    (:class:`~grid_tasks.maui.queue_cache.QueueCache`)."""

    created: Any = None
    rows: array = field(default_factory=lambda: array("q"))
    jobs: list[Job] = field(default_factory=list)
    cache: QueueCache = field(default_factory=QueueCache)
    changes: int | None = None  # the RM's change counter read before ``rows``
    priority: np.ndarray | None = None  # each row's queue priority, in ``rows`` order
    submit: np.ndarray | None = None  # each job's submission time, in ``rows`` order


_images: dict[tuple[str, str], QueueImage] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class QueueSnapshot:
    """The ``(id, version)`` rows of one RM's idle queue, in queue order, as read at
    one moment (:func:`read_queue`: flat, id then version), and the incarnation of the
    database they are from."""

    key: tuple[str, str]
    created: Any
    rows: array
    changes: int | None = None  # the RM's change counter, read before the rows


def read_queue(session: Any, rm: str) -> QueueSnapshot:
    """Read ``rm``'s idle queue and keep it as the RM's image.  Nothing at all while
    the RM's change counter is the kept image's; the jobs of the counts since then,
    from the change log, merged into the image in memory (:func:`_apply_log`); the
    whole queue, column-wise, when there is no image, too much changed or the log no
    longer holds every count since (:func:`_reload`)."""
    # (the iteration has the RM's row in the session already: no query then)
    row = session.get(ResourceManager, rm)
    created = None if row is None else row.created_at
    key = (str(session.get_bind().url), rm)
    changes = session.connection().scalar(_CHANGES, {"rm": rm}) or 0  # before any row
    queue = QueueSnapshot(key, created, array("q"), changes)
    image = _image(key, created)
    if image is not None and image.changes == changes:
        return dataclasses.replace(queue, rows=image.rows)  # no row changed since
    kept = None if image is None else _apply_log(session, queue, image)
    if kept is None:
        return _reload(session, queue, image)
    with _lock:
        _images[key] = kept
    return dataclasses.replace(queue, rows=kept.rows)


def _apply_log(session: Any, queue: QueueSnapshot, image: QueueImage) -> QueueImage | None:
    """``image`` with the jobs logged since its count read again: those idle now merged
    in queue order, the others dropped; None when it cannot be (no count or priority
    kept, a count missing from the log, too many jobs, a NULL submission time)."""
    if image.changes is None or image.priority is None or image.submit is None \
            or queue.changes < image.changes:
        return None
    rm, conn = queue.key[1], session.connection()
    logged = list(conn.scalars(_LOGGED, {"rm": rm, "since": image.changes,
                                         "upto": queue.changes}))
    if len(logged) != queue.changes - image.changes:
        return None  # pruned past the image's count
    changed = np.unique(np.array(logged, dtype=np.int64))
    if len(changed) > min(MERGE_MAX, max(100, len(image.jobs) // 10)):
        return None
    cols = read_rows(session, rm, changed.tolist())
    if cols is None:
        return None
    rows, jobs, priority, submit = merged(
        (image.rows, image.jobs, image.priority, image.submit), changed,
        (flat_of(cols.pairs), cols.jobs(), cols.priority, cols.submit))
    return QueueImage(queue.created, rows, jobs, image.cache, queue.changes, priority, submit)


def _reload(session: Any, queue: QueueSnapshot, image: QueueImage | None) -> QueueSnapshot:
    """Read the whole queue column-wise (:mod:`~grid_tasks.scheduling.idle_load`) and
    keep it as the RM's image, the jobs of ``image`` reused for the rows it holds at
    the same version; the snapshot of it.  Should a NULL key leave the order to SQL,
    the ordered ``(id, version)`` read instead (its jobs are built by
    :func:`idle_core_jobs`)."""
    rm = queue.key[1]
    with collector_paused():  # (100,000 jobs that all outlive the load: gc_pause)
        cols = read_all(session, rm)
        if cols is None:
            return dataclasses.replace(queue, rows=_flat(session, _QUEUE, rm))
        kept = _image_of_columns(queue, cols, image)
    with _lock:
        _images[queue.key] = kept
    return dataclasses.replace(queue, rows=kept.rows)


def _image_of_columns(queue: QueueSnapshot, cols: QueueColumns,
                      image: QueueImage | None) -> QueueImage:
    """The image of the queue read as ``cols``: the jobs of ``image`` for the rows it
    holds at the same version, new ones for the others."""
    if image is None or not image.jobs:
        jobs = cols.jobs()
    else:
        src = kept_at(image.rows, cols.pairs)
        new_at = np.flatnonzero(src < 0).tolist()
        jobs = gather(image.jobs, src)
        for k, job in zip(new_at, cols.jobs(new_at)):
            jobs[k] = job
    return QueueImage(queue.created, flat_of(cols.pairs), jobs,
                      image.cache if image is not None else QueueCache(), queue.changes,
                      cols.priority, cols.submit)


def _flat(session: Any, stmt: Any, rm: str) -> array:
    """``(id, version)`` rows of ``stmt`` as one flat array (id, version, id, ...)."""
    result = session.connection().execute(stmt, {"rm": rm})
    out, cursor = array("q"), result.cursor
    try:  # in batches: no list of 100,000 tuples at once (the process keeps its peak)
        while rows := cursor.fetchmany(FETCH):
            out.extend(chain.from_iterable(rows))
        return out
    finally:
        result.close()


def _image(key: tuple[str, str], created: Any) -> QueueImage | None:
    with _lock:
        image = _images.get(key)
    return image if image is not None and image.created == created else None


def forget(rm: str) -> None:
    """Drop what this process keeps of ``rm``'s idle queue (every database): the
    transaction it was read in wrote jobs and rolled back, so the counter it was read
    with may come again with other rows."""
    with _lock:
        for key in [k for k in _images if k[1] == rm]:
            del _images[key]


@contextmanager
def forgotten_on_error(rm: str) -> Iterator[None]:
    """Around a transaction that writes jobs and reads ``rm``'s idle queue: should it
    fail (and roll back), what was kept of the queue is forgotten (:func:`forget`)."""
    try:
        yield
    except BaseException:
        forget(rm)
        raise


def image_of(queue: QueueSnapshot) -> QueueImage | None:
    """The image kept for the RM and database of ``queue`` (None: none yet, or one of
    an earlier database under the same URL)."""
    return _image(queue.key, queue.created)


def idle_core_jobs(session: Any, rm: str, queue: QueueSnapshot | None = None) -> list[Job]:
    """The core jobs of ``rm``'s idle queue (as ``queue`` read it, else read now) in
    queue order (priority, submission, id): the image's, an unchanged queue the same
    list.  Only for a queue :func:`read_queue` left in SQL's order (a NULL submission
    time) are rows read here, those not in the image at the same version."""
    queue = read_queue(session, rm) if queue is None else queue
    image = image_of(queue)
    if image is not None and (image.rows is queue.rows or image.rows == queue.rows):
        return image.jobs  # nothing changed, or the image read_queue just made
    pairs = pairs_of(queue.rows)
    src = kept_at(image.rows, pairs) if image is not None else np.full(len(pairs), -1)
    new_at = np.flatnonzero(src < 0).tolist()
    jobs = gather(image.jobs if image is not None else [], src)
    prio = np.zeros(len(pairs), dtype=np.int64)
    if image is not None and image.priority is not None:
        prio = image.priority[np.maximum(src, 0)]
    stale, fresh = pairs[new_at, 0].tolist(), {}
    for start in range(0, len(stale), CHUNK):
        for row in session.connection().execute(_ROWS, {"ids": stale[start:start + CHUNK]}):
            fresh[row.id] = (core_job(row), row.queue_priority)
    for k, job_id in zip(new_at, stale):
        jobs[k], prio[k] = fresh.get(job_id, (None, 0))
    keep = np.array([j is not None for j in jobs], dtype=bool)  # (gone meanwhile: not idle)
    jobs = [j for j in jobs if j is not None]
    cache = image.cache if image is not None else QueueCache()
    with _lock:
        _images[queue.key] = QueueImage(queue.created, flat_of(pairs[keep]), jobs, cache,
                                        queue.changes, prio[keep])
    return jobs


def queue_cache(queue: QueueSnapshot) -> QueueCache:
    """The core's cache of derived facts for the RM of ``queue`` (after
    :func:`idle_core_jobs` for it)."""
    image = image_of(queue)
    return image.cache if image is not None else QueueCache()
