"""Iteration durations per resource manager, kept as a small histogram in Redis.

The scheduling iteration calls :func:`record_iteration` after each run; any
process (the metrics endpoint, ``grid-tasks metrics show``) reads them back
with :func:`read_iterations`.  One hash per RM: per-bucket counts (``in:<bound>``,
summed into cumulative ones on reading), the count, the sum and the last duration,
updated in one MULTI of five commands.  Hashes written by earlier versions hold
cumulative ``le:<bound>`` counts; reading adds them in, so no history is lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grid_tasks.errors import GridTasksError

PREFIX = "grid_tasks:metrics:iteration:"
RMS_KEY = PREFIX + "rms"
#: Upper bounds (seconds): an iteration is milliseconds when idle, seconds on a busy RM.
BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                              30.0, 60.0, float("inf"))


def _key(rm: str) -> str:
    return PREFIX + rm


def _field(bound: float, kind: str = "le") -> str:
    """``le:`` cumulative (written by earlier versions), ``in:`` this bucket alone."""
    return f"{kind}:+Inf" if bound == float("inf") else f"{kind}:{bound:g}"


def record_iteration(redis: Any, rm: str, seconds: float) -> None:
    """Add one iteration of ``rm`` that took ``seconds`` to its histogram."""
    if not rm or not isinstance(seconds, (int, float)) or not seconds >= 0:
        raise GridTasksError(f"record_iteration: bad sample rm={rm!r} seconds={seconds!r}")
    # One bucket per sample, not every bucket above it: every iteration pays for this,
    # on the gatekeeper that has just started a job (fourteen commands were five).
    bound = next(b for b in BUCKETS if seconds <= b)
    pipe = redis.pipeline(transaction=True)
    pipe.hincrby(_key(rm), _field(bound, "in"), 1)
    pipe.hincrby(_key(rm), "count", 1)
    pipe.hincrbyfloat(_key(rm), "sum", float(seconds))
    pipe.hset(_key(rm), "last", repr(float(seconds)))
    pipe.sadd(RMS_KEY, rm)
    pipe.execute()


@dataclass(frozen=True)
class IterationStats:
    """One RM's histogram: cumulative (bound, count) pairs, count, sum, last duration."""

    rm: str
    buckets: list[tuple[float, int]]
    count: int
    sum: float
    last: float | None


def read_iterations(redis: Any) -> list[IterationStats]:
    """Every RM's iteration histogram, sorted by RM."""
    rms = sorted(r.decode() if isinstance(r, bytes) else r for r in redis.smembers(RMS_KEY))
    pipe = redis.pipeline(transaction=False)
    for rm in rms:
        pipe.hgetall(_key(rm))
    found = []
    for rm, raw in zip(rms, pipe.execute()):
        data = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes)
                                                              else v) for k, v in raw.items()}
        buckets, below = [], 0
        for b in BUCKETS:
            below += int(data.get(_field(b, "in"), 0))
            buckets.append((b, below + int(data.get(_field(b), 0))))
        last = data.get("last")
        found.append(IterationStats(rm, buckets, int(data.get("count", 0)),
                                    float(data.get("sum", 0.0)),
                                    float(last) if last is not None else None))
    return found
