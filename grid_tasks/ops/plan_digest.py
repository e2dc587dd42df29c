"""What the operator commands keep of one RM's plan: its :class:`PlanDigest`, and the
packed form Redis stores (see :mod:`grid_tasks.ops.plan_cache` for when one is reused).

The ranking of a deep queue (100,000 idle jobs) stays in the packed form, three flat
arrays in showq's order (:class:`Ranked`): ``showq`` pages it by walking its first
rows and ``showstart`` asks whether one job is in it, so neither builds a Python
object per job (decoding it into a dict of tuples cost ~0.2 s a command).
"""

from __future__ import annotations

import json
import struct
import sys
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

#: First bytes of a packed digest (a layout change bumps it; an old entry is a miss).
MAGIC = b"GTPD1"
_LENGTH = struct.Struct("<I")
_INF = float("inf")

#: showq's sort key of an idle job: (-priority, submission time, id)
IdleKey = tuple[float, float, int]


class Ranked:
    """An RM's idle jobs in showq's order (priority down, then submission, then id):
    parallel arrays of ids, priorities and submission times (inf when unknown).

    ``flagged``: which of them carry a hold or a dependency (showq lists those as
    blocked or not once it has read their rows: finding them in SQL is a pass over the
    queue's JSON columns); None when not known."""

    __slots__ = ("ids", "priority", "submit", "flagged", "_members")

    def __init__(self, ids: array | None = None, priority: array | None = None,
                 submit: array | None = None, flagged: frozenset[int] | None = None) -> None:
        self.ids = array("q") if ids is None else ids
        self.priority = array("d") if priority is None else priority
        self.submit = array("d") if submit is None else submit
        if not len(self.ids) == len(self.priority) == len(self.submit):
            raise ValueError("a ranking's columns differ in length")
        self.flagged = flagged
        self._members: frozenset[int] | None = None

    @classmethod
    def of(cls, ranking: Mapping[int, tuple[float, float]],
           flagged: frozenset[int] | None = None) -> Ranked:
        """The ranking of ``job id -> (priority, submission time)``, sorted here."""
        ordered = sorted(ranking.items(), key=lambda kv: (-kv[1][0], kv[1][1], kv[0]))
        return cls(array("q", [k for k, _ in ordered]), array("d", [p for _, (p, _s) in ordered]),
                   array("d", [s for _, (_p, s) in ordered]), flagged)

    def __len__(self) -> int:
        return len(self.ids)

    def __contains__(self, job_id: object) -> bool:
        """Whether the job (an int id, or its digits as the Maui core names it) is ranked;
        the first question builds the set of ids (once)."""
        if isinstance(job_id, str):
            if not job_id.isdigit():
                return False
            job_id = int(job_id)
        if self._members is None:
            self._members = frozenset(self.ids)
        return job_id in self._members

    def keys(self) -> Iterator[IdleKey]:
        """showq's key of each job, in order (lazily: a page reads only its first rows)."""
        return ((-p, s, i) for i, p, s in zip(self.ids, self.priority, self.submit))

    def as_dict(self) -> dict[int, tuple[float, float]]:
        """``job id -> (priority, submission time)`` of every job (one entry per job)."""
        return dict(zip(self.ids.tolist(), zip(self.priority.tolist(), self.submit.tolist())))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Ranked):
            return NotImplemented
        return (self.ids, self.priority, self.submit, self.flagged) == (
            other.ids, other.priority, other.submit, other.flagged)

    def __repr__(self) -> str:
        return f"Ranked({len(self)} jobs)"


@dataclass
class PlanDigest:
    """What the operator commands need of one plan of ``rm``, made at ``made``."""

    rm: str
    made: float  # POSIX seconds
    mark: str  # the state_mark it was made under
    #: the idle jobs' priorities and submission times, in showq's order
    ranked: Ranked = field(default_factory=Ranked)
    #: job id -> allocation: the iteration starts it
    started: dict[int, dict[str, int]] = field(default_factory=dict)
    #: job id -> (start, end, allocation) of its job reservation
    reserved: dict[int, tuple[float, float, dict[str, int]]] = field(default_factory=dict)

    @property
    def ranking(self) -> dict[int, tuple[float, float]]:
        """The ranking as ``job id -> (priority, submission time)`` (built per call)."""
        return self.ranked.as_dict()

    def _head(self) -> dict[str, Any]:
        """Everything but the ranking's rows, as JSON-able values."""
        head = {"rm": self.rm, "made": self.made, "mark": self.mark, "ranking": len(self.ranked),
                "started": [[k, a] for k, a in self.started.items()],
                "reserved": [[k, s, e, a] for k, (s, e, a) in self.reserved.items()]}
        if self.ranked.flagged is not None:
            head["flagged"] = sorted(self.ranked.flagged)
        return head

    @classmethod
    def _from_head(cls, d: dict[str, Any], ranked: Ranked) -> PlanDigest:
        if d.get("flagged") is not None:  # (a digest from before it was kept: unknown)
            ranked.flagged = frozenset(int(i) for i in d["flagged"])
        return cls(d["rm"], float(d["made"]), d["mark"], ranked,
                   {int(k): dict(a) for k, a in d["started"]},
                   {int(k): (float(s), float(e), dict(a)) for k, s, e, a in d["reserved"]})

    def to_bytes(self) -> bytes:
        """The packed form kept in Redis: a JSON header (all but the ranking's rows, and
        their number), then the ranking as three little-endian arrays (ids, priorities,
        submission times) in showq's order."""
        meta = json.dumps(self._head(), separators=(",", ":")).encode()
        cols = [self.ranked.ids, self.ranked.priority, self.ranked.submit]
        if sys.byteorder != "little":
            cols = [array(c.typecode, c) for c in cols]
            for col in cols:
                col.byteswap()
        return MAGIC + _LENGTH.pack(len(meta)) + meta + b"".join(c.tobytes() for c in cols)

    @classmethod
    def from_bytes(cls, data: bytes) -> PlanDigest:
        """The digest :meth:`to_bytes` packed; ValueError for anything else."""
        if not data.startswith(MAGIC):
            raise ValueError("not a packed plan digest")
        at = len(MAGIC) + _LENGTH.size
        (size,) = _LENGTH.unpack_from(data, len(MAGIC))
        head = json.loads(data[at:at + size])
        n, at = int(head["ranking"]), at + size
        cols = (array("q"), array("d"), array("d"))
        if at + 24 * n != len(data):
            raise ValueError("a packed plan digest of the wrong length")
        for col in cols:
            col.frombytes(data[at:at + 8 * n])
            at += 8 * n
        if sys.byteorder != "little":
            for col in cols:
                col.byteswap()
        return cls._from_head(head, Ranked(*cols))
