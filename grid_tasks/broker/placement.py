"""Lowering for the broker: which resource managers may hold each component of a request.

A component that names its ``resourceManagerContact`` is *fixed* to that RM; one that
does not is *unplaced* and may go to every RM of the collection that accepts the
requester (Legion's resource veto on who may use it), narrowed by its MIL
``requirements`` relation when it has one: an RM qualifies when the RM itself or one
of its nodes (each accepting the requester) satisfies the relation.  RMs too small to
ever hold the component (fewer processors or nodes in all than it asks for) are left
out.  A component no RM can hold raises :class:`PlacementError`, naming the component
and why, before anything is estimated or reserved.

Pure: works on a :class:`~grid_tasks.legion.collection.Collection` already read, never
talks to Redis, Celery or SQL and never reads the clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from grid_tasks.broker.planner import Need
from grid_tasks.errors import GridTasksError
from grid_tasks.legion.collection import Collection, Requester, Resource
from grid_tasks.mil import MILError
from grid_tasks.rsl.lower import SubjobRequest

__all__ = ["Component", "PlacementError", "components", "component_label", "requester_text"]

#: Walltime of a component whose RSL gives neither maxWallTime nor maxTime (as GRAM).
DEFAULT_DURATION_S = 3600


class PlacementError(GridTasksError):
    """A component of a request that no resource manager can ever hold (says which, why)."""

    def __init__(self, message: str, *, label: str | None = None) -> None:
        self.label = label
        super().__init__(message)

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "label": self.label}


@dataclass(frozen=True)
class Component:
    """One subjob to place: ``procs`` processors for ``duration`` s on one of ``candidates``."""

    index: int
    label: str
    procs: int
    duration: float
    fixed: str | None
    candidates: tuple[str, ...]
    requirements: str | None = None
    host_count: int | None = None
    sub: SubjobRequest | None = field(default=None, compare=False, repr=False)

    def need(self) -> Need:
        """The planner's view of this component."""
        return Need(self.procs, float(self.duration), rms=frozenset(self.candidates))

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "label": self.label, "procs": self.procs,
                "duration": self.duration, "fixed": self.fixed,
                "candidates": list(self.candidates), "requirements": self.requirements}


def component_label(sub: SubjobRequest) -> str:
    """The component's label as DUROC names it (``subjobN`` when the RSL gives none)."""
    return sub.label or f"subjob{sub.index}"


def requester_text(requester: Requester | None) -> str:
    """``user@host`` (or ``anonymous``) for messages."""
    if requester is None or not requester.user:
        return "an anonymous requester"
    return requester.user + (f"@{requester.host}" if requester.host else "")


def components(subs: Sequence[SubjobRequest], collection: Collection,
               requester: Requester | None) -> list[Component]:
    """One :class:`Component` per lowered subjob, with the RMs that may hold it."""
    rms = collection.resources("rm")
    if not rms:
        raise PlacementError("the collection knows no resource manager: nothing can be placed")
    out = []
    for sub in subs:
        label = component_label(sub)
        duration = sub.max_wall_time_s or sub.max_time_s or DEFAULT_DURATION_S
        if sub.rm_contact:
            candidates = _fixed(sub, label, rms, requester)
        else:
            candidates = _unplaced(sub, label, rms, collection, requester)
        out.append(Component(sub.index, label, int(sub.count), float(duration),
                             sub.rm_contact, tuple(candidates), sub.requirements,
                             sub.host_count, sub))
    return out


def _fixed(sub: SubjobRequest, label: str, rms: list[Resource],
           requester: Requester | None) -> list[str]:
    """A component that names its RM: that RM, if known, open to the requester, big enough."""
    found = next((r for r in rms if r.rm == sub.rm_contact), None)
    if found is None:
        raise PlacementError(
            f"component {label!r} names resource manager {sub.rm_contact!r}, which the "
            f"collection does not know (known: {', '.join(r.rm for r in rms)})", label=label)
    if not found.access.admits(requester):
        raise PlacementError(
            f"component {label!r}: resource manager {found.rm} does not accept "
            f"{requester_text(requester)}", label=label)
    why = too_small(sub, found)
    if why:
        raise PlacementError(f"component {label!r} can never run on {found.rm}: {why}",
                             label=label)
    return [found.rm]


def _unplaced(sub: SubjobRequest, label: str, rms: list[Resource], collection: Collection,
              requester: Requester | None) -> list[str]:
    """Every RM open to the requester, matching the requirements and big enough."""
    open_rms = [r for r in rms if r.access.admits(requester)]
    if not open_rms:
        raise PlacementError(f"component {label!r}: no resource manager accepts "
                             f"{requester_text(requester)}", label=label)
    if sub.requirements:
        try:
            matched = {r.rm for r in collection.query(sub.requirements, requester, kind=None)}
        except MILError as exc:
            raise PlacementError(f"component {label!r}: its requirements cannot be read: "
                                 f"{exc}", label=label) from exc
        open_rms = [r for r in open_rms if r.rm in matched]
        if not open_rms:
            raise PlacementError(
                f"component {label!r}: requirements {sub.requirements!r} match no resource "
                f"manager that accepts {requester_text(requester)}", label=label)
    fitting = [r.rm for r in open_rms if not too_small(sub, r)]
    if not fitting:
        biggest = max(int(r.attributes.get("procs", 0)) for r in open_rms)
        raise PlacementError(
            f"component {label!r} can never run anywhere: it asks for {sub.count} processors"
            + (f" on {sub.host_count} hosts" if sub.host_count else "")
            + f" and the largest resource manager it may use "
              f"({', '.join(r.rm for r in open_rms)}) has {biggest}", label=label)
    return fitting


def too_small(sub: SubjobRequest, rm: Resource) -> str | None:
    """Why ``rm`` can never hold ``sub`` (as GRAM's own submission check), or None.

    A Slurm cluster's nodes are Slurm's, not the topology's: its size is unknown here,
    and its estimate says "never" for what it can never hold."""
    if rm.attributes.get("scheduler") == "slurm":
        return None
    procs = int(rm.attributes.get("procs", 0))
    if sub.count > procs:
        return f"it asks for {sub.count} processors and {rm.rm} has {procs} in all"
    nodes = int(rm.attributes.get("nodes", 0))
    if sub.host_count and sub.host_count > nodes:
        return f"hostCount {sub.host_count} but {rm.rm} has {nodes} nodes"
    return None
