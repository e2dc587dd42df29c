"""The job-side runtime of coallocated (DUROC) jobs: ``from grid_tasks import runtime``.

Each process of a subjob calls :func:`barrier` before doing anything that cannot
be undone; once every subjob is started the control side releases it and all
processes run forward together (or, if the job is cancelled or a strict subjob
fails, :func:`barrier` raises :class:`BarrierAbortedError` and the process must
exit non-zero - an uncaught exception does).  Processes then bootstrap their own
communication with small tagged messages:

* intra-subjob, between any two processes of one subjob, by rank and tag;
* inter-subjob, between the rank-0 processes of the subjobs of the inter-subjob
  group (the ``blocking-join`` subjobs), addressed by subjob address - other
  ranks get :class:`NotRankZeroError`, independent subjobs :class:`NotInGroupError`;
* :func:`bootstrap_subjob_exchange`, where every member's rank 0 contributes
  bytes and all receive the list in subjob order.

Messages are bytes, queued per destination *and tag*: a receive for one tag
takes the oldest message with that tag and leaves every other tag queued, in
whatever order they arrived.  Receives block, bounded by ``timeout`` (or
``GRID_TASKS_RECEIVE_TIMEOUT``) when given.  Unlike DUROC's library, every call
may be made from several threads at once.

The process learns its place from its environment:

==============================  ======================================================
variable                        meaning
==============================  ======================================================
``GRID_TASKS_RUNTIME_URL``      Redis URL of the coordination store, with credentials
                                confined to this job's keys (set by the control side)
``GRID_TASKS_COALLOC_ID``       the coallocated job's id
``GRID_TASKS_SUBJOB_INDEX``     this subjob's address: a stable number given when the
                                subjob was added and never reused (deleting a subjob
                                leaves a gap)
``GRID_TASKS_SUBJOB_LABEL``     this subjob's label (informational)
``GRID_TASKS_RANK``             this process's rank in its subjob, 0..size-1 (set by
                                the job manager; on a Slurm RM srun's
                                ``SLURM_PROCID`` stands in for it)
``GRID_TASKS_SIZE``             the subjob's process count (set by the job manager;
                                on a Slurm RM ``SLURM_NTASKS``)
``GRID_TASKS_BARRIER_TIMEOUT``  optional: seconds before barrier() and the group join
                                give up with BarrierTimeoutError (default: no limit)
``GRID_TASKS_RECEIVE_TIMEOUT``  optional: default seconds for receives
``GRID_TASKS_REDIS_TLS_*``      with a ``rediss://`` runtime URL: CA, client
                                certificate and key (see grid_tasks.security)
==============================  ======================================================

Tags are non-empty strings up to 256 characters; the prefix ``grid_tasks.`` is
reserved.  The same calls exist as a command: ``grid-tasks runtime --help``.
"""

from __future__ import annotations

import threading

from grid_tasks.duroc.store_errors import (
    BarrierAbortedError, BarrierTimeoutError, CoordinationError, JobNotFoundError,
    NotInGroupError, NotRankZeroError, ReceiveTimeoutError, RuntimeEnvironmentError,
    RuntimeMisuseError,
)
from grid_tasks.duroc.store_models import JobStructure, Message, SubjobInfo
from grid_tasks.runtime.client import InterSubjobStructure, Runtime
from grid_tasks.runtime.env import RuntimeEnv, runtime_environment

__all__ = [
    "BarrierAbortedError", "BarrierTimeoutError", "CoordinationError", "InterSubjobStructure",
    "JobNotFoundError", "JobStructure", "Message", "NotInGroupError", "NotRankZeroError",
    "ReceiveTimeoutError", "Runtime", "RuntimeEnv", "RuntimeEnvironmentError",
    "RuntimeMisuseError", "SubjobInfo", "barrier", "bootstrap_subjob_exchange", "current",
    "inter_subjob_receive", "inter_subjob_receive_message", "inter_subjob_send",
    "inter_subjob_structure", "intra_subjob_rank", "intra_subjob_receive",
    "intra_subjob_receive_message", "intra_subjob_send", "intra_subjob_size",
    "runtime_environment",
]

_current: Runtime | None = None
_current_lock = threading.Lock()


def current() -> Runtime:
    """This process's :class:`Runtime`, built from the environment on first use."""
    global _current
    with _current_lock:
        if _current is None:
            _current = Runtime.from_environ()
        return _current


def barrier(timeout: float | None = None) -> JobStructure | None:
    """Enter the start barrier; return once released (see :meth:`Runtime.barrier`)."""
    return current().barrier(timeout)


def intra_subjob_rank() -> int:
    """This process's rank in its subjob (0..size-1)."""
    return current().intra_subjob_rank()


def intra_subjob_size() -> int:
    """The number of processes in this subjob."""
    return current().intra_subjob_size()


def intra_subjob_send(rank: int, tag: str, data: bytes) -> None:
    """Send ``data`` to process ``rank`` of this subjob under ``tag``."""
    current().intra_subjob_send(rank, tag, data)


def intra_subjob_receive(tag: str, timeout: float | None = None) -> bytes:
    """The next intra-subjob message with ``tag`` (other tags stay queued)."""
    return current().intra_subjob_receive(tag, timeout)


def intra_subjob_receive_message(tag: str, timeout: float | None = None) -> Message:
    """Like :func:`intra_subjob_receive`, also telling the sender's rank."""
    return current().intra_subjob_receive_message(tag, timeout)


def inter_subjob_structure(timeout: float | None = None) -> InterSubjobStructure:
    """Join the inter-subjob group (rank 0 only); this subjob's and the others' addresses."""
    return current().inter_subjob_structure(timeout)


def inter_subjob_send(address: int, tag: str, data: bytes) -> None:
    """Send ``data`` to rank 0 of the subjob at ``address`` (rank 0 only)."""
    current().inter_subjob_send(address, tag, data)


def inter_subjob_receive(tag: str, timeout: float | None = None) -> bytes:
    """The next inter-subjob message with ``tag`` for this subjob (rank 0 only)."""
    return current().inter_subjob_receive(tag, timeout)


def inter_subjob_receive_message(tag: str, timeout: float | None = None) -> Message:
    """Like :func:`inter_subjob_receive`, also telling the sender's subjob address."""
    return current().inter_subjob_receive_message(tag, timeout)


def bootstrap_subjob_exchange(info: bytes, timeout: float | None = None, *,
                              exchange: int | None = None) -> list[bytes]:
    """Every group member's rank 0 contributes ``info``; returns all, in subjob order.

    Successive exchanges are numbered 0, 1, ... per process (or by ``exchange``).
    """
    return current().bootstrap_subjob_exchange(info, timeout, exchange=exchange)
