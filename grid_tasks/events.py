"""Job state events over Redis pub/sub, so waiting clients never poll the database.

Every state change of job ``<id>`` is published on ``grid_tasks:job:<id>:events`` as a
JSON object ``{"job": id, "state": "ACTIVE", "reason": ..., "at": epoch}``.  A waiter
subscribes FIRST, then reads SQL once (the change may have happened before it
subscribed), then blocks on the channel: no change is missed and no loop queries SQL.
Output lines of a job go to a capped Redis stream ``grid_tasks:job:<id>:output``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import redis

PREFIX = "grid_tasks:job"
#: Output lines kept per job in Redis (older lines remain in the state-dir files).
OUTPUT_MAXLEN = 10_000


def channel(job_id: int) -> str:
    """The pub/sub channel of one job's state changes."""
    return f"{PREFIX}:{job_id}:events"


def output_stream(job_id: int) -> str:
    """The Redis stream holding one job's output lines."""
    return f"{PREFIX}:{job_id}:output"


@dataclass(frozen=True)
class JobEvent:
    """One published state change."""

    job: int
    state: str
    reason: str | None = None
    at: float | None = None

    def to_json(self) -> str:
        return json.dumps({"job": self.job, "state": self.state, "reason": self.reason,
                           "at": self.at})

    @classmethod
    def from_json(cls, raw: bytes | str) -> "JobEvent":
        data = json.loads(raw)
        return cls(int(data["job"]), str(data["state"]), data.get("reason"), data.get("at"))


def publish(client: redis.Redis, event: JobEvent) -> None:
    """Tell every waiter of ``event.job`` about a state change (fire and forget)."""
    client.publish(channel(event.job), event.to_json())


def subscribe(client: redis.Redis, job_id: int) -> Any:
    """A pub/sub object already subscribed to the job's channel (confirmation consumed)."""
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(channel(job_id))
    return pubsub


def next_event(pubsub: Any, timeout: float) -> JobEvent | None:
    """Block up to ``timeout`` seconds for the next event; None on timeout."""
    message = pubsub.get_message(timeout=max(0.0, timeout))
    if message is None or message.get("type") != "message":
        return None
    return JobEvent.from_json(message["data"])


def append_output(client: Any, job_id: int, stream: str, node: str, rank: int,
                  line: bytes) -> None:
    """Append one output line of a process to the job's stream (capped)."""
    client.xadd(output_stream(job_id), {"s": stream, "n": node, "r": rank, "l": line},
                maxlen=OUTPUT_MAXLEN, approximate=True)


@dataclass(frozen=True)
class OutputLine:
    """One captured line: which stream, node and rank wrote it."""

    id: str
    stream: str
    node: str
    rank: int
    text: str


def read_output(client: redis.Redis, job_id: int, after: str = "0-0",
                block_ms: int | None = None, count: int = 1000) -> list[OutputLine]:
    """Output lines after stream id ``after`` (optionally blocking for new ones)."""
    kwargs: dict[str, Any] = {"count": count}
    if block_ms is not None:
        kwargs["block"] = block_ms
    found = client.xread({output_stream(job_id): after}, **kwargs)
    lines: list[OutputLine] = []
    for _key, entries in found or ():
        for entry_id, fields in entries:
            lines.append(_line(entry_id, fields))
    return lines


def iter_output(client: redis.Redis, job_id: int) -> Iterator[OutputLine]:
    """Every stored output line of the job, oldest first."""
    after = "0-0"
    while True:
        batch = read_output(client, job_id, after)
        if not batch:
            return
        yield from batch
        after = batch[-1].id


def _line(entry_id: bytes | str, fields: dict[Any, Any]) -> OutputLine:
    def get(key: str) -> Any:
        value = fields.get(key.encode(), fields.get(key))
        return value.decode(errors="replace") if isinstance(value, bytes) else value

    ident = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return OutputLine(ident, get("s"), get("n"), int(get("r")), get("l"))
