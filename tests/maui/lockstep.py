"""Two schedulers driven through the same events, every answer compared: the test of a
fast path or a compiled core against its reference (tests/maui/test_pool_conservative.py,
test_conservative_core.py, test_lean.py)."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from typing import Any

from grid_tasks.maui import Job, Scheduler

#: One event: (time, order at that time, tie-breaker, ("submit", Job) | ("cancel", job id))
Event = tuple[float, int, int, tuple[str, Any]]


def events_of(jobs: Sequence[tuple[Job, float | None]]) -> list[Event]:
    """Each job's submission, and its cancel ``after`` seconds when one is given."""
    out: list[Event] = [(job.submit_time, 0, i, ("submit", job)) for i, (job, _) in enumerate(jobs)]
    out += [(job.submit_time + after, 1, i, ("cancel", job.id))
            for i, (job, after) in enumerate(jobs) if after is not None]
    return out


def drive(pair: list[Scheduler], events: list[Event], run: dict[str, float],
          view: Callable[[Any], tuple], *, same: Callable[[Any, Any], bool] = lambda a, b: a == b,
          drain: bool = True, after: Callable[[Any], None] | None = None) -> list[tuple[float, tuple]]:
    """Run both schedulers through ``events`` (each started job ends ``run[id]`` later),
    asserting that every call answers alike by ``same``; ``view`` turns an iteration's
    result into comparable values, its first item the starts ``(id, time, ...)``.
    ``drain``: go on through the wake-ups left after the last event (not for a standing
    reservation, which always has a next one).  ``after(both)`` runs after each
    iteration.  Returns each iteration's (time, view)."""
    events = list(events)
    heapq.heapify(events)
    count, now, log, waiting = len(events), 0.0, [], set()

    def both(call: Callable[[Scheduler], Any]) -> Any:
        out = [call(s) for s in pair]
        assert same(out[0], out[1]), (now, out)
        return out[0]

    while events or (drain and pair[0].next_wakeup(now) is not None):
        wake = both(lambda s: s.next_wakeup(now))
        if wake is not None and (not events or wake < events[0][0]):
            now = wake
        else:
            now, _, _, (what, item) = heapq.heappop(events)
            if what == "submit":
                both(lambda s: s.submit(item, now))
                waiting.add(item.id)
            elif what == "cancel":
                if item not in waiting:
                    continue
                both(lambda s: s.cancel(item, now))
                waiting.discard(item)
            else:
                both(lambda s: s.job_ended(item, now))
        decided = both(lambda s: view(s.iterate(now)))
        log.append((now, decided))
        for jid, t, *_ in decided[0]:
            waiting.discard(jid)
            count += 1
            heapq.heappush(events, (t + run[jid], 2, count, ("end", jid)))
        if after is not None:
            after(both)
    both(lambda s: sorted((r.name, r.start, r.end) for r in s.reservations()))
    return log
