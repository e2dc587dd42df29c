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

Even ``(id, version)`` of 100,000 rows was most of an iteration in which nothing
changed, so the image also keeps the RM's idle-queue change counter
(:class:`~grid_tasks.db.models.IdleQueueChanges`, kept by triggers on ``jobs`` in every
writer's transaction) as read *before* its rows: while the counter is that value, no
row entered, left or changed in the queue since, and the image is the queue without
reading a row.  (A write committed between the counter's read and the rows' makes the
image newer than its counter: the next read only re-reads.)  An image read inside a
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
from operator import attrgetter
from typing import Any

import numpy as np
from sqlalchemy import bindparam, select

from grid_tasks.db.models import IdleQueueChanges
from grid_tasks.db.models import Job as JobRow
from grid_tasks.db.models import ResourceManager
from grid_tasks.gc_pause import collector_paused
from grid_tasks.maui import Job
from grid_tasks.maui.queue_cache import QueueCache
from grid_tasks.scheduling.idle_load import QueueColumns, read_all
from grid_tasks.scheduling.job_rows import (
    IDLE_COLUMNS, IDLE_MAUI_STATES, ORDER, core_job, epoch,
)
from grid_tasks.states import JobState

_SUBMIT = attrgetter("submit_time")
#: Rows read per query when many jobs are new (bounded IN lists).
CHUNK = 500
#: ``(id, version)`` rows fetched from the driver at a time.
FETCH = 10_000

# Built once, so their cache keys are memoized (building them per iteration cost more).
_QUEUE = select(JobRow.id, JobRow.version).where(
    JobRow.rm == bindparam("rm"), JobRow.state == JobState.PENDING,
    JobRow.maui_state.in_(IDLE_MAUI_STATES)).order_by(*ORDER)
_QUEUE_BY_ID = _QUEUE.order_by(None).order_by(JobRow.id)
_ROWS = select(*IDLE_COLUMNS, JobRow.priority.label("queue_priority")).where(
    JobRow.id.in_(bindparam("ids", expanding=True)))
_KEYS = select(JobRow.id, JobRow.priority, JobRow.submit_time).where(
    JobRow.id.in_(bindparam("ids", expanding=True)))
#: At most this many new or changed rows (or a tenth of the queue) are ordered into
#: the kept queue in memory; more, and the ordered read is made instead.
MERGE_MAX = 5_000
_CHANGES = select(IdleQueueChanges.changes).where(IdleQueueChanges.rm == bindparam("rm"))

@dataclass
class QueueImage:
    """What this process keeps of one RM's idle queue between iterations: the
    ``(id, version)`` rows last read (flat, in queue order, and in id order), the core
    jobs built from
    them in that order, and the core's derived facts about them
    (:class:`~grid_tasks.maui.queue_cache.QueueCache`)."""

    created: Any = None
    rows: array = field(default_factory=lambda: array("q"))
    by_id: array = field(default_factory=lambda: array("q"))  # the same rows in id order
    jobs: list[Job] = field(default_factory=list)
    cache: QueueCache = field(default_factory=QueueCache)
    changes: int | None = None  # the RM's change counter read before ``rows``
    priority: np.ndarray | None = None  # each row's system priority, in ``rows`` order


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
    """Read ``rm``'s idle queue, ids and versions only (cheap even when long: the
    driver's tuples, no result rows built).  Nothing at all while the RM's change
    counter is the kept image's.  Else first in id order, which the index gives
    without a sort: when that is the set of rows the kept image was built from, the
    queue's order is the image's (the order is a function of the rows, and every
    change of a row bumps its version); when only some rows are new or changed, the
    order is merged in memory (:func:`_merged`); only else is the ordered read made."""
    # (the iteration has the RM's row in the session already: no query then)
    row = session.get(ResourceManager, rm)
    created = None if row is None else row.created_at
    key = (str(session.get_bind().url), rm)
    changes = session.connection().scalar(_CHANGES, {"rm": rm}) or 0  # before any row
    image = _image(key, created)
    if image is not None and image.changes == changes:
        return QueueSnapshot(key, created, image.rows, changes)  # no row changed since
    if image is None:
        return _reload(session, QueueSnapshot(key, created, array("q"), changes), None)
    by_id = _flat(session, _QUEUE_BY_ID, rm)
    if image.by_id == by_id:
        return QueueSnapshot(key, created, image.rows, changes)
    rows = _merged(session, image, by_id)
    if rows is None:
        return _reload(session, QueueSnapshot(key, created, array("q"), changes), image)
    return QueueSnapshot(key, created, rows, changes)


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
        src = _kept_at(image, cols.pairs)
        new_at = np.flatnonzero(src < 0).tolist()
        jobs = _kept_jobs(image, src)
        for k, job in zip(new_at, cols.jobs(new_at)):
            jobs[k] = job
    by_id = cols.pairs[np.argsort(cols.pairs[:, 0], kind="stable")]
    return QueueImage(queue.created, _flat_of(cols.pairs), _flat_of(by_id), jobs,
                      image.cache if image is not None else QueueCache(), queue.changes,
                      cols.priority)


def _merged(session: Any, image: QueueImage, by_id: array) -> array | None:
    """The queue's ``(id, version)`` rows in :data:`ORDER` from ``by_id`` (id order),
    the image's keys of its kept rows and the keys of the new or changed ones read now:
    what the ordered read would return, without sorting 100,000 rows in SQL.  None
    (make the ordered read) for many new rows, a NULL key (its place differs between
    backends), or a row gone meanwhile.  The order is the same: priorities are
    integers; distinct submission times stay distinct and in order as POSIX floats
    (microseconds, far above a double's resolution at today's epoch); ties by id."""
    pairs = _pairs(by_id)
    if image.priority is None or not len(pairs) or not image.jobs:
        return None
    src = _kept_at(image, pairs)
    new = np.flatnonzero(src < 0)
    if len(new) > min(MERGE_MAX, max(100, len(pairs) // 10)):
        return None
    ids, keys = pairs[new, 0].tolist(), {}
    for start in range(0, len(ids), CHUNK):
        for job_id, prio, submit in session.connection().execute(
                _KEYS, {"ids": ids[start:start + CHUNK]}):
            keys[job_id] = (prio, epoch(submit))
    found = [keys.get(i, (None, None)) for i in ids]
    if any(p is None or t is None for p, t in found):
        return None
    kept = np.maximum(src, 0)
    prio = image.priority[kept]
    submit = np.fromiter(map(_SUBMIT, image.jobs), float, len(image.jobs))[kept]
    if len(new):
        prio[new] = [p for p, _ in found]
        submit[new] = [t for _, t in found]
    return _flat_of(pairs[np.lexsort((pairs[:, 0], submit, -prio))])


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
    queue order (priority, submission, id); those unchanged since an earlier call (same
    id and version) are not read again, and an unchanged queue is the same list."""
    queue = read_queue(session, rm) if queue is None else queue
    image = image_of(queue)
    if image is not None and (image.rows is queue.rows or image.rows == queue.rows):
        if image.changes != queue.changes:
            image.changes = queue.changes  # the same rows: now known at this count
        return image.jobs  # nothing changed: the very same list
    pairs = _pairs(queue.rows)
    src = _kept_at(image, pairs)  # per row: its job's position in the image, or -1
    new_at = np.flatnonzero(src < 0).tolist()
    fresh: dict[int, Job] = {}
    prio, new_priority = _kept_priority(image, src), {}
    stale = pairs[new_at, 0].tolist()  # (no Python int per kept row: they fragmented memory)
    for start in range(0, len(stale), CHUNK):
        for row in session.connection().execute(_ROWS, {"ids": stale[start:start + CHUNK]}):
            fresh[row.id] = core_job(row)
            new_priority[row.id] = row.queue_priority
    jobs = _kept_jobs(image, src)
    gone = []
    for k, job_id in zip(new_at, stale):
        jobs[k] = fresh.get(job_id)
        if jobs[k] is None:  # gone between the two reads (started, cancelled): not idle
            gone.append(k)
        elif prio is not None:
            prio[k] = new_priority[job_id]
    if gone:
        keep = np.ones(len(pairs), dtype=bool)
        keep[gone] = False
        pairs, jobs = pairs[keep], [j for j in jobs if j is not None]
        prio = None if prio is None else prio[keep]
    by_id = pairs[np.argsort(pairs[:, 0], kind="stable")]
    cache = image.cache if image is not None else QueueCache()
    with _lock:
        _images[queue.key] = QueueImage(queue.created, _flat_of(pairs), _flat_of(by_id), jobs,
                                        cache, queue.changes, prio)
    return jobs


def _kept_priority(image: QueueImage | None, src: np.ndarray) -> np.ndarray | None:
    """Per row, the image's system priority at ``src`` (new rows' are filled in by the
    caller); None when the image has none (no order can be merged from it then)."""
    if image is None or not image.jobs:
        return np.zeros(len(src), dtype=np.int64)
    if image.priority is None:
        return None
    return image.priority[np.maximum(src, 0)]


def _kept_jobs(image: QueueImage | None, src: np.ndarray) -> list[Any]:
    """Per row, the image's job at ``src`` (None where ``src`` is -1), gathered by
    numpy: a list of positions as Python ints was 100,000 objects per change."""
    if image is None or not image.jobs:
        return [None] * len(src)
    kept = np.empty(len(image.jobs) + 1, dtype=object)
    kept[:-1] = image.jobs  # (the last slot stays None: where src is -1)
    return kept[src].tolist()


def _pairs(flat: array) -> np.ndarray:
    """A flat ``(id, version, ...)`` array as an n x 2 int64 array."""
    return np.frombuffer(flat, dtype=np.int64).reshape(-1, 2) if len(flat) else \
        np.zeros((0, 2), dtype=np.int64)


def _flat_of(pairs: np.ndarray) -> array:
    out = array("q")
    out.frombytes(np.ascontiguousarray(pairs, dtype=np.int64).tobytes())
    return out


def _kept_at(image: QueueImage | None, pairs: np.ndarray) -> np.ndarray:
    """For each ``(id, version)`` row, where the image holds that job at that version
    (its position in ``image.jobs``), else -1."""
    if image is None or not image.jobs or not len(pairs):
        return np.full(len(pairs), -1, dtype=np.int64)
    old = _pairs(image.rows)
    sorter = np.argsort(old[:, 0], kind="stable")
    sorted_ids = old[sorter, 0]
    at = np.minimum(np.searchsorted(sorted_ids, pairs[:, 0]), len(sorted_ids) - 1)
    hit = (sorted_ids[at] == pairs[:, 0]) & (old[sorter[at], 1] == pairs[:, 1])
    return np.where(hit, sorter[at], -1)


def queue_cache(queue: QueueSnapshot) -> QueueCache:
    """The core's cache of derived facts for the RM of ``queue`` (after
    :func:`idle_core_jobs` for it)."""
    image = image_of(queue)
    return image.cache if image is not None else QueueCache()
