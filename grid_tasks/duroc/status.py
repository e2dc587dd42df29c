"""What an application learns of a coallocated job: its snapshot, and how it is named.

No database here: the scheduler builds these from its rows
(:mod:`grid_tasks.duroc.records`) and sends them as data; an application rebuilds them
(:meth:`CoallocStatus.from_dict`).  The coordination store id of job ``N`` is
``coalloc-N``, its contact ``duroc://coalloc/N``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grid_tasks.duroc.store_errors import SubjobNotFoundError
from grid_tasks.errors import NotFoundError
from grid_tasks.states import JobState, SubjobCommsType, SubjobStartType


def store_id(job_id: int) -> str:
    """The coordination store id of coallocated job ``job_id``."""
    return f"coalloc-{int(job_id)}"


def parse_job_ref(ref: int | str) -> int:
    """A coallocated job id from an id, ``coalloc-N`` or its ``duroc://coalloc/N`` contact."""
    text = str(ref).strip().rstrip("/")
    tail = text.rsplit("/", 1)[-1].rsplit("-", 1)[-1]
    if not tail.isdigit():
        raise NotFoundError(f"not a coallocated job id or contact: {ref!r}")
    return int(tail)


@dataclass(frozen=True)
class SubjobStatus:
    """One subjob at one instant: where it runs, its GRAM state, barrier entries."""

    label: str
    address: int
    rm: str
    start_type: SubjobStartType
    comms_type: SubjobCommsType
    size: int
    state: JobState
    gram_job: int | None = None
    entered: int | None = None
    reason: str | None = None
    exit_code: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "address": self.address, "rm": self.rm,
                "start_type": self.start_type.value, "comms_type": self.comms_type.value,
                "size": self.size, "state": self.state.value, "gram_job": self.gram_job,
                "entered": self.entered, "reason": self.reason, "exit_code": self.exit_code}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SubjobStatus":
        """The inverse of :meth:`to_dict` (the scheduler's answer)."""
        return cls(str(data["label"]), int(data["address"]), str(data["rm"]),
                   SubjobStartType(data["start_type"]), SubjobCommsType(data["comms_type"]),
                   int(data["size"]), JobState(data["state"]), data.get("gram_job"),
                   data.get("entered"), data.get("reason"), data.get("exit_code"))


@dataclass(frozen=True)
class CoallocStatus:
    """A coallocated job's snapshot (``subjob_states``): job state, barrier, subjobs."""

    id: int
    contact: str
    state: JobState
    barrier: str
    reason: str | None = None
    subjobs: tuple[SubjobStatus, ...] = field(default_factory=tuple)
    #: what an action's answer adds (a cancel: subjob cancels still under way, and why)
    notes: tuple[str, ...] = ()

    @property
    def terminal(self) -> bool:
        return self.state.terminal

    def subjob(self, label: str) -> SubjobStatus:
        for sub in self.subjobs:
            if sub.label == label:
                return sub
        raise SubjobNotFoundError(f"no subjob labelled {label!r}", job=store_id(self.id))

    def to_dict(self) -> dict[str, Any]:
        out = {"id": self.id, "contact": self.contact, "state": self.state.value,
               "barrier": self.barrier, "reason": self.reason,
               "subjobs": [s.to_dict() for s in self.subjobs]}
        if self.notes:
            out["notes"] = list(self.notes)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CoallocStatus":
        """The inverse of :meth:`to_dict` (the scheduler's answer)."""
        return cls(int(data["id"]), str(data["contact"]), JobState(data["state"]),
                   str(data["barrier"]), data.get("reason"),
                   tuple(SubjobStatus.from_dict(s) for s in data.get("subjobs") or ()),
                   tuple(str(n) for n in data.get("notes") or ()))
