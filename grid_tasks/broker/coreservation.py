"""What a confirmed co-reservation is: one common start, one grid reservation per subjob.

:class:`CoReservation` is the broker's answer (JSON-able both ways): the job key the
tokens are confirmed under, the common start, and per subjob the RM, the name of the
grid reservation made there, its allocation and the token that the RM checks at start
(Legion's ``start_object(token)``).  :class:`CoReservationRefused` is the typed error
when no candidate schedule could be reserved; nothing is left held then.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from grid_tasks.errors import GridTasksError
from grid_tasks.utc import iso_seconds as iso

__all__ = ["ReservedPart", "CoReservation", "CoReservationRefused", "CoReservationUnrecorded",
           "iso"]


@dataclass(frozen=True)
class ReservedPart:
    """Subjob ``label`` (position ``index``) reserved on ``rm`` as grid reservation ``name``."""

    index: int
    label: str
    rm: str
    name: str
    start: float
    end: float
    allocation: Mapping[str, int]
    token: str
    id: int | None = None

    @property
    def procs(self) -> int:
        return sum(self.allocation.values())

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "label": self.label, "rm": self.rm,
                "reservation": self.name, "id": self.id, "start": self.start,
                "start_iso": iso(self.start), "end": self.end, "end_iso": iso(self.end),
                "allocation": dict(self.allocation), "procs": self.procs, "token": self.token}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ReservedPart":
        return cls(int(data["index"]), str(data["label"]), str(data["rm"]),
                   str(data["reservation"]), float(data["start"]), float(data["end"]),
                   {str(n): int(p) for n, p in dict(data["allocation"]).items()},
                   str(data["token"]), None if data.get("id") is None else int(data["id"]))


@dataclass(frozen=True)
class CoReservation:
    """A confirmed co-reservation: every part starts at ``start``."""

    job_key: str
    start: float
    parts: tuple[ReservedPart, ...]
    attempts: tuple[Mapping[str, Any], ...] = ()
    warnings: tuple[str, ...] = field(default=())

    @property
    def end(self) -> float:
        return max(p.end for p in self.parts)

    @property
    def rms(self) -> tuple[str, ...]:
        """The distinct RMs, in subjob order."""
        return tuple(dict.fromkeys(p.rm for p in self.parts))

    def part(self, label: str) -> ReservedPart:
        """The part of subjob ``label`` (KeyError if none)."""
        for p in self.parts:
            if p.label == label:
                return p
        raise KeyError(label)

    def to_dict(self) -> dict[str, Any]:
        return {"job_key": self.job_key, "start": self.start, "start_iso": iso(self.start),
                "end": self.end, "end_iso": iso(self.end), "rms": list(self.rms),
                "parts": [p.to_dict() for p in self.parts],
                "attempts": [dict(a) for a in self.attempts], "warnings": list(self.warnings)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "CoReservation":
        return cls(str(data["job_key"]), float(data["start"]),
                   tuple(ReservedPart.from_dict(p) for p in data["parts"]),
                   tuple(dict(a) for a in data.get("attempts", ())),
                   tuple(data.get("warnings", ())))


class CoReservationRefused(GridTasksError):
    """No candidate schedule of job ``job_key`` could be reserved on every RM.

    ``attempts`` lists each candidate tried (outcome, refusing resource, RM refusals);
    the tokens and grid reservations taken on the way have been released.
    """

    def __init__(self, job_key: str, attempts: Sequence[Mapping[str, Any]],
                 warnings: Sequence[str] = ()) -> None:
        self.job_key, self.attempts, self.warnings = job_key, tuple(attempts), tuple(warnings)
        reasons = "; ".join(_attempt_text(a) for a in self.attempts) or "no candidate schedule"
        super().__init__(f"co-reservation {job_key}: no candidate schedule could be reserved "
                         f"on every resource manager: {reasons}")

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "job_key": self.job_key,
                "attempts": [dict(a) for a in self.attempts], "warnings": list(self.warnings)}


class CoReservationUnrecorded(GridTasksError):
    """Co-reservation ``job_key`` was confirmed but could not be recorded as complete in
    SQL (``reason`` says why); its tokens and grid reservations have been released, since
    unrecorded rows would not survive a restart of the token store's Redis."""

    def __init__(self, job_key: str, reason: str) -> None:
        self.job_key, self.reason = job_key, reason
        super().__init__(f"co-reservation {job_key}: confirmed, but recording it as complete "
                         f"in SQL failed ({reason}); released again")


def _attempt_text(attempt: Mapping[str, Any]) -> str:
    text = f"#{attempt.get('index')} at {iso(float(attempt.get('start', 0)))} " \
           f"{attempt.get('outcome')}"
    refusals = attempt.get("refusals") or []
    if refusals:
        text += " (" + ", ".join(f"{r['rm']}: {r['reason']}" for r in refusals) + ")"
    elif attempt.get("detail"):
        text += f" ({attempt['detail']})"
    return text
