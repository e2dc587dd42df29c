"""Arrays of a kept idle queue: its ``(id, version)`` rows, and a changed queue merged
into the kept one in memory.

Pure numpy over the rows and the job objects already built; no SQL.  A queue of
100,000 jobs is one flat ``array('q')`` of ids and versions (no Python int per row:
100,000 of them per change fragmented memory) and the list of its core jobs.
"""

from __future__ import annotations

from array import array
from itertools import compress
from typing import Any

import numpy as np

from grid_tasks.maui import Job

def pairs_of(flat: array) -> np.ndarray:
    """A flat ``(id, version, ...)`` array as an n x 2 int64 array."""
    return np.frombuffer(flat, dtype=np.int64).reshape(-1, 2) if len(flat) else \
        np.zeros((0, 2), dtype=np.int64)


def flat_of(pairs: np.ndarray) -> array:
    """An n x 2 array of ``(id, version)`` rows as one flat ``array('q')``."""
    out = array("q")
    out.frombytes(np.ascontiguousarray(pairs, dtype=np.int64).tobytes())
    return out


def kept_at(old_rows: array, pairs: np.ndarray) -> np.ndarray:
    """For each ``(id, version)`` row of ``pairs``, its position among ``old_rows`` when
    held there at that very version, else -1."""
    if not len(old_rows) or not len(pairs):
        return np.full(len(pairs), -1, dtype=np.int64)
    old = pairs_of(old_rows)
    sorter = np.argsort(old[:, 0], kind="stable")
    sorted_ids = old[sorter, 0]
    at = np.minimum(np.searchsorted(sorted_ids, pairs[:, 0]), len(sorted_ids) - 1)
    hit = (sorted_ids[at] == pairs[:, 0]) & (old[sorter[at], 1] == pairs[:, 1])
    return np.where(hit, sorter[at], -1)


def gather(jobs: list[Job], src: np.ndarray) -> list[Any]:
    """``jobs[k]`` for each ``k`` of ``src`` (None where it is -1), gathered by numpy: a
    list of positions as Python ints was 100,000 objects per change."""
    if not jobs:
        return [None] * len(src)
    kept = np.empty(len(jobs) + 1, dtype=object)
    kept[:-1] = jobs  # (the last slot stays None: where src is -1)
    return kept[src].tolist()


def ordered(ids: np.ndarray, priority: np.ndarray, submit: np.ndarray) -> np.ndarray:
    """Positions in :data:`~grid_tasks.scheduling.job_rows.ORDER`: priority descending,
    then submission, then id.  SQL's order: priorities are integers; distinct
    submission times stay distinct and in order as POSIX floats (microseconds, far
    above a double's resolution at today's epoch)."""
    return np.lexsort((ids, submit, -priority))


#: A queue as kept: flat ``(id, version)`` rows, their core jobs, queue priorities and
#: submission times, all in queue order.
Queue = tuple[array, list[Job], np.ndarray, np.ndarray]


def merged(kept: Queue, changed: np.ndarray, new: Queue) -> Queue:
    """The queue after a change: the ``kept`` one but the jobs of the ``changed`` ids,
    and the changed ones that are idle now (``new``), in queue order."""
    rows, jobs, priority, submit = kept
    old = pairs_of(rows)
    keep = ~np.isin(old[:, 0], changed)
    pairs = np.concatenate((old[keep], pairs_of(new[0])))
    priority = np.concatenate((priority[keep], new[2]))
    submit = np.concatenate((submit[keep], new[3]))
    order = ordered(pairs[:, 0], priority, submit)
    every = np.empty(len(pairs), dtype=object)
    held = int(keep.sum())
    every[:held] = list(compress(jobs, keep.tolist()))
    every[held:] = new[1]
    return flat_of(pairs[order]), every[order].tolist(), priority[order], submit[order]
