"""What a client learns of a job: its status snapshot and its recorded state changes.

Below the client: a gatekeeper's answer (a cancel) is rebuilt from these, and the
GRAM layer builds them from its rows, without importing the client.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from grid_tasks.errors import NotFoundError
from grid_tasks.states import JobState, MauiJobState


@dataclass(frozen=True)
class JobStatus:
    """A snapshot of one job: GRAM and Maui state, why, exit codes, times, nodes."""

    id: int
    contact: str | None
    rm: str | None
    state: JobState
    maui_state: MauiJobState
    reason: str | None = None
    gram_error: str | None = None
    gram_error_code: int | None = None
    exit_code: int | None = None
    exit_codes: dict[str, int] = field(default_factory=dict)
    submit_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    nodes: dict[str, int] = field(default_factory=dict)
    user: str | None = None

    @property
    def terminal(self) -> bool:
        return self.state.terminal

    @classmethod
    def from_row(cls, row: Any) -> "JobStatus":
        request = row.request or {}
        return cls(row.id, row.contact, row.rm, JobState(row.state), MauiJobState(row.maui_state),
                   row.failure_reason, row.gram_error, row.gram_error_code, row.exit_code,
                   dict(request.get("exit_codes") or {}), row.submit_time, row.start_time,
                   row.end_time, dict(row.nodes_allocated or {}), row.user)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "JobStatus":
        """The inverse of :meth:`to_dict` (a gatekeeper's answer)."""
        values = dict(data)
        for name in ("submit_time", "start_time", "end_time"):
            if values.get(name):
                values[name] = datetime.fromisoformat(values[name])
        values["state"] = JobState(values["state"])
        values["maui_state"] = MauiJobState(values["maui_state"])
        return cls(**{k: v for k, v in values.items() if k in cls.__dataclass_fields__})

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (times as ISO 8601)."""
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if isinstance(value, datetime):
                value = value.isoformat()
            elif isinstance(value, (JobState, MauiJobState)):
                value = value.value
            out[name] = value
        return out


@dataclass(frozen=True)
class CancelAccepted:
    """A cancel the gatekeeper took while the grid's database was away: the job's
    managers act on it at once (or, when the job's owner must be checked first, once
    the database is back), and its end is recorded when the database returns.  The
    job's state is unknown until then (``state`` None)."""

    id: int
    rm: str | None
    reason: str
    state: None = None

    @property
    def terminal(self) -> bool:
        return False

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "rm": self.rm, "accepted": True, "reason": self.reason}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CancelAccepted":
        return cls(int(data["id"]), data.get("rm"), str(data.get("reason") or ""))


@dataclass(frozen=True)
class HistoryEntry:
    """One recorded state change."""

    from_state: JobState | None
    to_state: JobState
    reason: str | None
    at: datetime

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (states by value, time as ISO 8601)."""
        return {"from_state": None if self.from_state is None else self.from_state.value,
                "to_state": self.to_state.value, "reason": self.reason,
                "at": self.at.isoformat()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "HistoryEntry":
        """The inverse of :meth:`to_dict` (a gatekeeper's answer)."""
        before = data.get("from_state")
        return cls(None if before is None else JobState(before), JobState(data["to_state"]),
                   data.get("reason"), datetime.fromisoformat(data["at"]))


def parse_contact(contact: str) -> tuple[int, str]:
    """(job id, RM) of a GRAM job contact ``gram://<rm>/jobs/<id>``; NotFoundError for
    anything else."""
    head, _, rest = str(contact).partition("://")
    rm, _, tail = rest.partition("/jobs/")
    if head != "gram" or not rm or not tail.isdigit():
        raise NotFoundError(f"{contact!r} is not a GRAM job contact (gram://<rm>/jobs/<id>)")
    return int(tail), rm
