"""The runtime of one process of a coallocated job: barrier, ranks, tagged messages.

A :class:`Runtime` is bound to one process identity (:class:`RuntimeEnv`) and
talks to the coordination store with the job's own confined credentials.
Unlike DUROC's library every call is safe from several threads at once: the
store client takes one pooled connection per concurrent command, and the only
shared state here (the joined group, the bootstrap round counter) is locked.
The store client is :class:`~grid_tasks.duroc.resp.RespClient`, not redis-py,
whose import alone would delay every process's arrival at the barrier.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from grid_tasks.duroc.resp import RespClient
from grid_tasks.duroc.store import CoordinationStore
from grid_tasks.duroc.store_errors import (
    NotRankZeroError, RuntimeMisuseError, StoreUnavailableError,
)
from grid_tasks.duroc.store_keys import JobKeys, check_tag
from grid_tasks.duroc.store_models import JobStructure, Message, SubjobInfo
from grid_tasks.runtime.env import RuntimeEnv

RESERVED_TAG_PREFIX = "grid_tasks."


@dataclass(frozen=True)
class InterSubjobStructure:
    """The inter-subjob group as seen from one subjob (DUROC's job layout).

    ``subjobs`` are the group's members (``blocking-join`` subjobs of the released
    structure) in address order; ``local_address`` is this subjob's address and
    ``remote_addresses`` those of every other member, what DUROC's
    ``inter_subjob_structure`` returns.
    """

    local_address: int
    local_label: str
    subjobs: tuple[SubjobInfo, ...]

    @classmethod
    def from_structure(cls, structure: JobStructure, address: int) -> "InterSubjobStructure":
        local = structure.subjob(address)
        return cls(local.address, local.label, structure.group)

    @property
    def remote_addresses(self) -> tuple[int, ...]:
        return tuple(s.address for s in self.subjobs if s.address != self.local_address)

    @property
    def local_index(self) -> int:
        """Position of this subjob in ``subjobs`` (the bootstrap exchange order)."""
        return [s.address for s in self.subjobs].index(self.local_address)

    def to_dict(self) -> dict[str, Any]:
        return {"local_address": self.local_address, "local_label": self.local_label,
                "local_index": self.local_index,
                "remote_addresses": list(self.remote_addresses),
                "subjobs": [s.to_dict() for s in self.subjobs]}


def job_store(url: str, environ: Mapping[str, str] | None = None) -> CoordinationStore:
    """The store of a job's runtime URL, on a :class:`RespClient` (no redis-py import).

    A ``rediss://`` URL takes the ``GRID_TASKS_REDIS_TLS_*`` variables of ``environ``
    (default: this process's environment); nothing is contacted before the first call.
    """
    try:
        client = RespClient.from_url(url, environ)
    except ValueError as exc:
        raise StoreUnavailableError(f"bad coordination store URL: {exc}") from None
    return CoordinationStore(client)


def _user_tag(tag: str) -> str:
    check_tag(tag)
    if tag.startswith(RESERVED_TAG_PREFIX):
        raise RuntimeMisuseError(f"tag {tag!r}: the prefix {RESERVED_TAG_PREFIX!r} is reserved "
                                 "for grid_tasks' own exchanges")
    return tag


class Runtime:
    """DUROC's runtime calls for one process (see :mod:`grid_tasks.runtime`)."""

    def __init__(self, env: RuntimeEnv, store: CoordinationStore | None = None) -> None:
        self.env = env
        self.store = store or job_store(env.url)
        self.keys = JobKeys(env.job, self.store.prefix)
        self._lock = threading.Lock()
        self._group: InterSubjobStructure | None = None
        self._bootstrap_round = 0

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> "Runtime":
        return cls(RuntimeEnv.from_environ(environ))

    def close(self) -> None:
        self.store.close()

    # -- barrier and identity ------------------------------------------------------------

    def barrier(self, timeout: float | None = None) -> JobStructure | None:
        """Enter the start barrier and wait for its release; the released structure.

        Returns at once (None) in a ``no-barrier`` subjob.  Raises
        :class:`BarrierAbortedError` when the job is cancelled or fails (the process
        must then exit without running past this point) and
        :class:`BarrierTimeoutError` after ``timeout`` (default
        ``GRID_TASKS_BARRIER_TIMEOUT``, else no limit).
        """
        limit = self.env.barrier_timeout if timeout is None else timeout
        return self.store.wait_release(self.env.job, self.env.subjob, self.env.rank, limit,
                                       size=self.env.size)

    def intra_subjob_rank(self) -> int:
        return self.env.rank

    def intra_subjob_size(self) -> int:
        return self.env.size

    # -- intra-subjob messaging -------------------------------------------------------------

    def intra_subjob_send(self, rank: int, tag: str, data: bytes) -> None:
        """Queue ``data`` for process ``rank`` of this subjob under ``tag``."""
        if not isinstance(rank, int) or not 0 <= rank < self.env.size:
            raise RuntimeMisuseError(
                f"destination rank {rank!r} outside this subjob of {self.env.size} processes",
                job=self.env.job)
        queue = self.keys.intra_queue(self.env.subjob, rank, _user_tag(tag))
        self.store.send(self.env.job, queue, self.env.rank, data)

    def intra_subjob_receive(self, tag: str, timeout: float | None = None) -> bytes:
        """The next message with ``tag`` sent to this process (other tags stay queued)."""
        return self.intra_subjob_receive_message(tag, timeout).data

    def intra_subjob_receive_message(self, tag: str, timeout: float | None = None) -> Message:
        """Like :meth:`intra_subjob_receive`, with the sender's rank."""
        queue = self.keys.intra_queue(self.env.subjob, self.env.rank, _user_tag(tag))
        return self._receive(queue, tag, timeout)

    def _receive(self, queue: str, tag: str, timeout: float | None) -> Message:
        limit = self.env.receive_timeout if timeout is None else timeout
        return self.store.receive(self.env.job, queue, tag, limit)

    # -- inter-subjob (rank 0 only) ---------------------------------------------------------

    def _require_rank_zero(self, call: str) -> None:
        if self.env.rank != 0:
            raise NotRankZeroError(
                f"{call}() is reserved to rank 0 of each subjob (this process is rank "
                f"{self.env.rank} of subjob {self.env.subjob})", job=self.env.job)

    def inter_subjob_structure(self, timeout: float | None = None) -> InterSubjobStructure:
        """Join the inter-subjob group (a group barrier) once; the group's layout.

        Rank 0 only (:class:`NotRankZeroError`); :class:`NotInGroupError` in an
        ``independent`` subjob.  Waits for the barrier release and for every member.
        """
        self._require_rank_zero("inter_subjob_structure")
        limit = self.env.barrier_timeout if timeout is None else timeout
        with self._lock:  # one join per process, whichever thread asks first
            if self._group is None:
                frozen = self.store.join_group(self.env.job, self.env.subjob, limit)
                self._group = InterSubjobStructure.from_structure(frozen, self.env.subjob)
            return self._group

    def inter_subjob_send(self, address: int, tag: str, data: bytes) -> None:
        """Queue ``data`` for rank 0 of the subjob at ``address`` under ``tag``."""
        self._inter_send(address, _user_tag(tag), data)

    def _inter_send(self, address: int, tag: str, data: bytes) -> None:
        group = self.inter_subjob_structure()
        if address not in {s.address for s in group.subjobs}:
            raise RuntimeMisuseError(f"no subjob at address {address!r} in the inter-subjob "
                                     f"group {[s.address for s in group.subjobs]}",
                                     job=self.env.job)
        queue = self.keys.inter_queue(address, tag)
        self.store.send(self.env.job, queue, self.env.subjob, data)

    def inter_subjob_receive(self, tag: str, timeout: float | None = None) -> bytes:
        """The next inter-subjob message with ``tag`` for this subjob."""
        return self.inter_subjob_receive_message(tag, timeout).data

    def inter_subjob_receive_message(self, tag: str, timeout: float | None = None) -> Message:
        """Like :meth:`inter_subjob_receive`, with the sender's subjob address."""
        return self._inter_receive(_user_tag(tag), timeout)

    def _inter_receive(self, tag: str, timeout: float | None) -> Message:
        self.inter_subjob_structure()
        return self._receive(self.keys.inter_queue(self.env.subjob, tag), tag, timeout)

    def bootstrap_subjob_exchange(self, info: bytes, timeout: float | None = None, *,
                                  exchange: int | None = None) -> list[bytes]:
        """Every group member's rank 0 contributes ``info``; all get all, in address order.

        Built on the public inter-subjob calls, like DUROC's bootstrap library;
        successive exchanges use distinct reserved tags so they never mix.  They
        are numbered per process from 0; ``exchange`` gives the number explicitly
        (for programs that run each exchange in a new process, like the CLI).
        """
        group = self.inter_subjob_structure(timeout)
        with self._lock:
            round_no = self._bootstrap_round if exchange is None else exchange
            self._bootstrap_round = max(self._bootstrap_round, round_no + 1)
        tag = f"{RESERVED_TAG_PREFIX}bootstrap.{round_no}"
        for address in group.remote_addresses:
            self._inter_send(address, tag, info)
        collected = {self.env.subjob: bytes(info)}
        while len(collected) < len(group.subjobs):
            message = self._inter_receive(tag, timeout)
            collected[message.sender] = message.data
        return [collected[s.address] for s in group.subjobs]
