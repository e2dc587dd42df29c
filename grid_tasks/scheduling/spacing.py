"""Fair sharing of the shared scheduler workers between RMs: a costly RM's full
iterations are spaced while other RMs' iterations wait.

A deep RM's iteration costs 0.4-1.4 s of CPU; run back to back on the shared workers
it holds a thread and the GIL, and the other RMs' iterations - cheap, but what their
jobs' starts wait for - slow down with it (issue 25: 115 -> 89 jobs/s).  While others
wait, this policy has such an RM rest after each iteration for as long as the
iteration took (its share of the workers at most a half), so the waiting ones get in
between.  An RM whose iterations are cheap is never delayed, nor a costly one while no
other RM waits; a delayed iteration is not dropped: the runner sends it for the
moment the rest ends (:func:`grid_tasks.scheduling.runner.iterate_here`).

Pure: no Redis, no clock; the runner hands in the last iteration's figures, whether
others wait and ``now``.  (An RM in a process of its own, ``scheduler = "own"``, is
never spaced: it shares no worker.)
"""

from __future__ import annotations

from dataclasses import dataclass

from grid_tasks.errors import ConfigError


@dataclass(frozen=True)
class LastIteration:
    """An RM's last full iteration: how long it took and when it ended (epoch seconds)."""

    duration: float
    ended: float

    def encode(self) -> str:
        """The form kept in Redis: ``"<duration> <ended>"``."""
        return f"{self.duration:.6f} {self.ended:.6f}"

    @classmethod
    def decode(cls, raw: bytes | str | None) -> "LastIteration | None":
        """The figures from :meth:`encode`'s form; None when absent or unreadable (the
        RM is then taken as cheap: nothing delays it)."""
        if raw is None:
            return None
        text = raw.decode() if isinstance(raw, bytes) else raw
        try:
            duration, ended = (float(part) for part in text.split())
        except ValueError:
            return None
        return cls(duration, ended)


@dataclass(frozen=True)
class CostlySpacing:
    """Rest a costly RM for ``factor`` x its last iteration's duration (at most
    ``max_rest_s``) after it, while other RMs' iterations wait for the shared workers.

    ``costly_s``: an iteration at least this long is costly (a shallow RM's takes a few
    milliseconds; a 10,000-job queue's about 0.1 s of CPU, a 50,000-job one's 0.5 s).
    """

    costly_s: float = 0.2
    factor: float = 1.0
    max_rest_s: float = 5.0
    #: a rest this short is none: the held-off iteration, sent for the rest's end, may
    #: come a timer tick early and must then run, not be sent again
    slack_s: float = 0.02

    def __post_init__(self) -> None:
        if min(self.costly_s, self.factor, self.max_rest_s, self.slack_s) < 0:
            raise ConfigError(f"iteration spacing figures must be non-negative: {self}")

    def rest(self, last: LastIteration | None, *, others_waiting: bool, now: float) -> float:
        """Seconds the RM's next full iteration waits from ``now`` (0: run it now)."""
        if last is None or not others_waiting or last.duration < self.costly_s:
            return 0.0
        rest = min(self.factor * last.duration, self.max_rest_s)
        # never longer than one rest: a clock ahead on the host that ran it gains nothing
        left = min(last.ended + rest - now, rest)
        return left if left > self.slack_s else 0.0
