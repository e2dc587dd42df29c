"""Value objects of the coordination store: subjob specs, structures, snapshots, messages."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from grid_tasks.duroc.store_errors import RuntimeMisuseError, SubjobNotFoundError
from grid_tasks.states import SubjobCommsType, SubjobStartType


class BarrierState(str, Enum):
    """Where a coallocated job stands with respect to its start barrier."""

    OPEN = "open"            # subjobs may still be added/deleted; processes wait
    RELEASED = "released"    # structure frozen; processes run forward
    ABORTED = "aborted"      # cancelled or failed; nobody may pass the barrier


@dataclass(frozen=True)
class SubjobSpec:
    """What the control side declares for one subjob: label, process count, DUROC types."""

    label: str
    size: int
    start_type: SubjobStartType = SubjobStartType.STRICT_BARRIER
    comms_type: SubjobCommsType = SubjobCommsType.BLOCKING_JOIN

    def __post_init__(self) -> None:
        if not isinstance(self.label, str) or not self.label:
            raise RuntimeMisuseError(f"subjob label must be a non-empty string, not {self.label!r}")
        if not isinstance(self.size, int) or isinstance(self.size, bool) or self.size < 1:
            raise RuntimeMisuseError(
                f"subjob {self.label!r}: size must be a positive process count, not {self.size!r}")
        object.__setattr__(self, "start_type", SubjobStartType(self.start_type))
        object.__setattr__(self, "comms_type", SubjobCommsType(self.comms_type))

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "size": self.size,
                "start_type": self.start_type.value, "comms_type": self.comms_type.value}


@dataclass(frozen=True)
class SubjobInfo:
    """One subjob as stored: its stable address (never reused) and its spec.

    ``entered`` is the number of distinct ranks in the barrier (snapshots only).
    """

    address: int
    label: str
    size: int
    start_type: SubjobStartType
    comms_type: SubjobCommsType
    entered: int | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "SubjobInfo":
        entered = data.get("entered")
        return cls(int(data["address"]), str(data["label"]), int(data["size"]),
                   SubjobStartType(data["start_type"]), SubjobCommsType(data["comms_type"]),
                   None if entered is None else int(entered))

    @property
    def in_barrier(self) -> bool:
        return self.start_type is not SubjobStartType.NO_BARRIER

    @property
    def in_group(self) -> bool:
        """Whether its rank 0 joins the inter-subjob communication group."""
        return self.comms_type is SubjobCommsType.BLOCKING_JOIN

    @property
    def complete(self) -> bool:
        """All its processes entered the barrier (snapshots only)."""
        return self.entered is not None and self.entered >= self.size

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"address": self.address, "label": self.label, "size": self.size,
                                "start_type": self.start_type.value,
                                "comms_type": self.comms_type.value}
        if self.entered is not None:
            data["entered"] = self.entered
        return data


def _subjobs(raw: Any) -> tuple[SubjobInfo, ...]:
    # Lua's cjson encodes an empty array as an empty object
    return tuple(SubjobInfo.from_json(item) for item in (raw or []))


@dataclass(frozen=True)
class JobStructure:
    """The subjobs of a job in address order, at one structure version."""

    job: str
    version: int
    subjobs: tuple[SubjobInfo, ...] = ()

    @classmethod
    def from_json(cls, job: str, data: dict[str, Any]) -> "JobStructure":
        return cls(job, int(data.get("version") or 0), _subjobs(data.get("subjobs")))

    def subjob(self, address: int) -> SubjobInfo:
        """The subjob at ``address``, or :class:`SubjobNotFoundError`."""
        for info in self.subjobs:
            if info.address == address:
                return info
        raise SubjobNotFoundError(f"no subjob at address {address}", job=self.job)

    def by_label(self, label: str) -> SubjobInfo:
        """The subjob labelled ``label``, or :class:`SubjobNotFoundError`."""
        for info in self.subjobs:
            if info.label == label:
                return info
        raise SubjobNotFoundError(f"no subjob labelled {label!r}", job=self.job)

    @property
    def group(self) -> tuple[SubjobInfo, ...]:
        """The subjobs of the inter-subjob group (``blocking-join``), in address order."""
        return tuple(info for info in self.subjobs if info.in_group)

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job, "version": self.version,
                "subjobs": [info.to_dict() for info in self.subjobs]}


@dataclass(frozen=True)
class JobSnapshot:
    """State, structure and barrier entry counts of a job at one instant."""

    job: str
    state: BarrierState
    version: int
    subjobs: tuple[SubjobInfo, ...] = ()
    reason: str = ""
    last_event: str = field(default="0-0", repr=False)

    @classmethod
    def from_json(cls, job: str, data: dict[str, Any]) -> "JobSnapshot":
        return cls(job, BarrierState(data["state"]), int(data.get("version") or 0),
                   _subjobs(data.get("subjobs")), str(data.get("reason") or ""),
                   str(data.get("last") or "0-0"))

    def pending(self, addresses: set[int] | None = None) -> list[SubjobInfo]:
        """Barrier subjobs (or those at ``addresses``) not yet complete."""
        chosen = [s for s in self.subjobs
                  if (s.address in addresses if addresses is not None else s.in_barrier)]
        return [s for s in chosen if not s.complete]

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job, "state": self.state.value, "version": self.version,
                "reason": self.reason, "subjobs": [s.to_dict() for s in self.subjobs]}


@dataclass(frozen=True)
class Message:
    """A received message: who sent it (rank, or subjob address), its tag and bytes."""

    sender: int
    tag: str
    data: bytes
