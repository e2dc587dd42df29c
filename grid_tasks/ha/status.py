"""What the HA beats are doing, read from Redis: leader, members, schedule, emissions."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from grid_tasks.ha.config import EMITTED_KEY, LEASE_KEY, MEMBERS_KEY, SCHEDULE_KEY
from grid_tasks.ha.lease import read_holder


@dataclass
class Member:
    """One beat process as it last reported itself."""

    identity: str
    role: str
    since: float
    seen: float
    emitted: int = 0


@dataclass
class Entry:
    """One schedule entry in Redis."""

    name: str
    task: str
    every: float | None
    kwargs: dict[str, Any]
    last_run_at: float | None
    due_at: float | None


@dataclass
class BeatStatus:
    """The leader (None if the lease is free), every member, every entry."""

    leader: str | None
    lease_ttl_ms: int
    members: list[Member] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_status(client: Any) -> BeatStatus:
    """Read the beats' shared state from the Redis of ``client`` (any decode setting)."""
    holder = read_holder(client, LEASE_KEY)
    emitted = {_text(k): int(v) for k, v in client.hgetall(EMITTED_KEY).items()}
    members = []
    for name, raw in client.hgetall(MEMBERS_KEY).items():
        data = json.loads(raw)
        ident = _text(name)
        role = data.get("role", "?")
        if role == "leader" and (holder is None or holder.identity != ident):
            role = "silent"  # said it led, but no longer holds the lease (dead or cut off)
        members.append(Member(ident, role, float(data.get("since", 0)),
                              float(data.get("seen", 0)), emitted.get(ident, 0)))
    members.sort(key=lambda m: (m.role != "leader", m.identity))
    return BeatStatus(holder.identity if holder else None, holder.ttl_ms if holder else 0,
                      members, read_entries(client))


def read_entries(client: Any) -> list[Entry]:
    """Every entry of the schedule with its period, last run and next due time."""
    from redbeat.decoder import RedBeatJSONDecoder

    entries = []
    for key, score in client.zrange(SCHEDULE_KEY, 0, -1, withscores=True):
        definition, meta = client.hmget(key, "definition", "meta")
        if not definition:
            continue
        spec = json.loads(definition, cls=RedBeatJSONDecoder)
        last = json.loads(meta, cls=RedBeatJSONDecoder).get("last_run_at") if meta else None
        schedule = spec.get("schedule")
        every = schedule.run_every.total_seconds() if hasattr(schedule, "run_every") else None
        entries.append(Entry(spec.get("name") or _text(key), spec.get("task", "?"), every,
                             spec.get("kwargs") or {}, _timestamp(last),
                             float(score) if score >= 0 else None))
    return sorted(entries, key=lambda e: e.name)


def _timestamp(value: Any) -> float | None:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value.timestamp()
    return None
