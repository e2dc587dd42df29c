"""What the operator commands keep of one RM's plan: its :class:`PlanDigest`, and the
packed form Redis stores (see :mod:`grid_tasks.ops.plan_cache` for when one is reused)."""

from __future__ import annotations

import json
import struct
import sys
from array import array
from dataclasses import dataclass, field, replace

#: First bytes of a packed digest (a layout change bumps it; an old entry is a miss).
MAGIC = b"GTPD1"
_LENGTH = struct.Struct("<I")


@dataclass
class PlanDigest:
    """What the operator commands need of one plan of ``rm``, made at ``made``."""

    rm: str
    made: float  # POSIX seconds
    mark: str  # the state_mark it was made under
    #: idle job id -> (priority, submission time; inf when unknown)
    ranking: dict[int, tuple[float, float]] = field(default_factory=dict)
    #: job id -> allocation: the iteration starts it
    started: dict[int, dict[str, int]] = field(default_factory=dict)
    #: job id -> (start, end, allocation) of its job reservation
    reserved: dict[int, tuple[float, float, dict[str, int]]] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({
            "rm": self.rm, "made": self.made, "mark": self.mark,
            "ranking": [[k, p, s if s != float("inf") else None]
                        for k, (p, s) in self.ranking.items()],
            "started": [[k, a] for k, a in self.started.items()],
            "reserved": [[k, s, e, a] for k, (s, e, a) in self.reserved.items()]},
            separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> "PlanDigest":
        d = json.loads(text)
        inf = float("inf")
        return cls(d["rm"], float(d["made"]), d["mark"],
                   {int(k): (float(p), inf if s is None else float(s)) for k, p, s in d["ranking"]},
                   {int(k): dict(a) for k, a in d["started"]},
                   {int(k): (float(s), float(e), dict(a)) for k, s, e, a in d["reserved"]})

    def to_bytes(self) -> bytes:
        """The packed form kept in Redis: a JSON header (all but the ranking), then the
        ranking in showq's order as three little-endian arrays (ids, priorities,
        submission times)."""
        ranked = sorted(self.ranking.items(), key=lambda kv: (-kv[1][0], kv[1][1], kv[0]))
        head = json.loads(replace(self, ranking={}).to_json()) | {"ranking": len(ranked)}
        meta = json.dumps(head, separators=(",", ":")).encode()
        cols = (array("q", [k for k, _ in ranked]), array("d", [p for _, (p, _s) in ranked]),
                array("d", [s for _, (_p, s) in ranked]))
        if sys.byteorder != "little":
            for col in cols:
                col.byteswap()
        return MAGIC + _LENGTH.pack(len(meta)) + meta + b"".join(c.tobytes() for c in cols)

    @classmethod
    def from_bytes(cls, data: bytes) -> "PlanDigest":
        """The digest :meth:`to_bytes` packed; ValueError for anything else."""
        if not data.startswith(MAGIC):
            raise ValueError("not a packed plan digest")
        at = len(MAGIC) + _LENGTH.size
        (size,) = _LENGTH.unpack_from(data, len(MAGIC))
        head = json.loads(data[at:at + size])
        n, at = int(head.pop("ranking")), at + size
        cols = (array("q"), array("d"), array("d"))
        for col in cols:
            col.frombytes(data[at:at + 8 * n])
            at += 8 * n
        if at != len(data) or len(cols[2]) != n:
            raise ValueError("a packed plan digest of the wrong length")
        if sys.byteorder != "little":
            for col in cols:
                col.byteswap()
        digest = cls.from_json(json.dumps(head | {"ranking": []}))
        digest.ranking = dict(zip(cols[0].tolist(), zip(cols[1].tolist(), cols[2].tolist())))
        return digest
