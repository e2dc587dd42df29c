"""The enactor's confirm hook in the live broker: grid reservations on the RMs, per placement.

For each candidate schedule the enactor has taken tokens for, :meth:`RmHolds.confirm`
asks every RM of the schedule to ``reserve`` its placements (in parallel), each bound
to the placement's token.  Reservations are kept per placement across candidates,
like the tokens: a placement unchanged since the previous candidate (same subjob, RM,
start, nodes and token) keeps its reservation, the others are released first.  A
reserve that timed out may still be made by the RM, so it is released like a made
one.  Whatever the outcome, nothing outlives the enactment except the confirmed
schedule's reservations.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from grid_tasks.broker.coreservation import ReservedPart
from grid_tasks.broker.enactor import Attempt
from grid_tasks.broker.planner import Placement, Schedule
from grid_tasks.broker.remote import RemoteRMs

__all__ = ["RmHolds", "part_name"]


def part_name(job_key: str, label: str) -> str:
    """The grid reservation name of subjob ``label`` of job ``job_key``."""
    return f"{job_key}.{label}"


class RmHolds:
    """Grid reservations made on the RMs during one enactment (see the module docstring)."""

    def __init__(self, remote: RemoteRMs, enactor: Any, job_key: str, labels: Sequence[str],
                 allow_early: bool, requester: Mapping[str, Any] | None) -> None:
        self.remote, self.enactor, self.job_key = remote, enactor, job_key
        self.labels, self.allow_early = list(labels), bool(allow_early)
        self.requester = dict(requester) if requester else None
        self.made: dict[Placement, ReservedPart] = {}
        self.unsure: dict[Placement, dict[str, Any]] = {}
        self.refusals: dict[Schedule, list[dict[str, Any]]] = {}

    def _kwargs(self, p: Placement, token: str) -> dict[str, Any]:
        label = self.labels[p.subjob]
        return {"rm": p.rm, "name": part_name(self.job_key, label), "allocation": dict(p.nodes),
                "start": p.start, "duration": p.duration, "token": token,
                "job_key": self.job_key, "label": label, "allow_early": self.allow_early,
                "requester": self.requester}

    def confirm(self, schedule: Schedule) -> bool:
        """Reserve every placement of ``schedule`` not held yet; False if an RM refused."""
        tokens = {p: self.enactor.token_of(p) for p in schedule.placements}
        self._drop([p for p, part in self.made.items() if tokens.get(p) != part.token])
        self._drop_unsure()
        todo = [p for p in schedule.placements if p not in self.made]
        calls = [self._kwargs(p, tokens[p]) for p in todo]
        refusals = []
        for p, kw, outcome in zip(todo, calls, self.remote.reserve(calls)):
            if outcome.ok:
                self.made[p] = self._part(p, kw, outcome.value)
                continue
            if outcome.timed_out:
                self.unsure[p] = kw
            refusals.append({"rm": p.rm, "label": kw["label"], "reason": outcome.reason()})
        self.refusals[schedule] = refusals
        return not refusals

    def _part(self, p: Placement, kw: Mapping[str, Any], answer: Mapping[str, Any]) -> ReservedPart:
        alloc = answer.get("allocation") or kw["allocation"]
        return ReservedPart(p.subjob, str(kw["label"]), p.rm, str(answer.get("name", kw["name"])),
                            float(answer.get("start", p.start)),
                            float(answer.get("end", p.start + p.duration)),
                            {str(n): int(k) for n, k in dict(alloc).items()}, str(kw["token"]),
                            None if answer.get("id") is None else int(answer["id"]))

    def _drop(self, placements: Iterable[Placement]) -> None:
        parts = [self.made.pop(p) for p in list(placements) if p in self.made]
        self.remote.release([{"rm": x.rm, "name": x.name, "token": x.token} for x in parts])

    def _drop_unsure(self) -> None:
        calls = [{"rm": kw["rm"], "name": kw["name"], "token": kw["token"]}
                 for kw in self.unsure.values()]
        self.unsure.clear()
        self.remote.release(calls)

    def undo(self, schedule: Schedule) -> None:
        """The tokens could not be confirmed after the RMs accepted: release them there."""
        self._drop(schedule.placements)
        self._drop_unsure()

    def release_all(self) -> None:
        """Release every reservation made or maybe made (the enactment failed)."""
        self._drop(list(self.made))
        self._drop_unsure()

    def release_except(self, schedule: Schedule) -> None:
        """Release what the confirmed ``schedule`` does not use."""
        keep = set(schedule.placements)
        self._drop([p for p in self.made if p not in keep])
        self._drop_unsure()

    def parts(self, schedule: Schedule) -> tuple[ReservedPart, ...]:
        """The confirmed schedule's reservations, in subjob order."""
        return tuple(self.made[p] for p in sorted(schedule.placements, key=lambda p: p.subjob))

    def describe(self, attempts: Sequence[Attempt]) -> list[dict[str, Any]]:
        """The enactor's attempts, each with the RM refusals of its schedule."""
        return [{**a.to_dict(), "rms": list(a.schedule.rms),
                 "refusals": self.refusals.get(a.schedule, [])} for a in attempts]
