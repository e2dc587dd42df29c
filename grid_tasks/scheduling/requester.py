"""Who asks an RM for a grid reservation: the credentials its ACLs may admit.

Part of the metascheduler protocol (:mod:`grid_tasks.scheduling.rm_service`); the
live loader (:mod:`grid_tasks.scheduling.state`) reads it back from a grid
reservation's row, so that reservations admitting those credentials lend it their
resources as when the RM accepted it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from grid_tasks.legion.refusals import ReservationRefused
from grid_tasks.maui import Job


@dataclass(frozen=True)
class Requester:
    """Who asks: the credentials a reservation ACL may admit (any may be missing).

    ``host`` is carried for the record: reservation ACLs have no host key."""

    user: str | None = None
    group: str | None = None
    account: str | None = None
    host: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "Requester":
        """From ``{"user", "group", "account", "host"}``; unknown keys are refused."""
        if not data:
            return cls()
        if not isinstance(data, Mapping):
            raise ReservationRefused(f"requester must be a mapping, got {type(data).__name__}",
                                     "bad_request")
        unknown = set(data) - {"user", "group", "account", "host"}
        if unknown:
            raise ReservationRefused(f"requester: unknown keys {sorted(unknown)} (known: user, "
                                     "group, account, host)", "bad_request")
        return cls(**{k: (None if v is None else str(v)) for k, v in data.items()})

    def to_dict(self) -> dict[str, str]:
        return {k: v for k, v in (("user", self.user), ("group", self.group),
                                  ("account", self.account), ("host", self.host)) if v}

    def probe(self, job_id: str, procs: int, duration: float, now: float) -> Any:
        """A core job of these credentials: what reservation ACLs are checked against."""
        return Job(id=job_id, tasks=procs, procs_per_task=1, walltime=duration,
                   submit_time=now, user=self.user, group=self.group, account=self.account)
