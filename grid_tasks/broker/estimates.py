"""Planner estimators over batched RM answers: memoized, fetched in parallel, RMs that do
not answer left out.

The planner (:mod:`.planner`) calls ``estimators[rm](procs, duration, t)`` one at a
time.  Every RM answer is a round trip, so :class:`Estimates` first asks every
(RM, size) the planner will need at the earliest instant *in one batch* (the fetcher
sends them all at once), then answers the planner from memory whenever it can: an RM
that said "earliest start ``s``, not before ``t0``" has the same earliest start for any
``t`` in ``[t0, s]``, and one that said "never" stays never.  Only the later instants of
the common-start search cost a new (single) call.  Answers are rounded up to whole
seconds (:func:`whole_second`), so the search settles even on instants already past.

An RM whose batch answer did not come in time is *dead* for this plan: left out of
the estimators with a warning.  Pure: the fetcher is injected (the live one sends the
RM tasks, tests pass plain functions).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from grid_tasks.broker.planner import Estimator

log = logging.getLogger(__name__)

Ask = tuple[str, int, float, float]            # rm, procs, duration, not_before
Start = tuple[float, dict[str, int]]           # time, {node: procs}
#: ``fetch(asks)`` -> per ask: starts earliest first ([] never), or None (no answer)
Fetcher = Callable[[Sequence[Ask]], Sequence["list[Start] | None"]]
#: answers this much before the asked instant count as at it (clock rounding)
SLACK_S = 1e-6


def whole_second(t: float) -> float:
    """``t`` rounded up to a whole second.

    An RM answers ``max(its clock, not_before)``: asked about an instant already past,
    it answers its own "now", a little later on every call, and the common-start search
    would chase its clock.  Rounded up, the next question is about a future instant,
    which a free RM answers exactly, so the search settles."""
    return float(math.ceil(t - SLACK_S))


class Estimates:
    """Memoized estimators for the planner over a batch ``fetch`` of RM answers."""

    def __init__(self, fetch: Fetcher) -> None:
        self.fetch = fetch
        self.known: dict[tuple[str, int, float], list[tuple[float, list[Start]]]] = {}
        self.dead: set[str] = set()
        self.warnings: list[str] = []
        self.calls = 0

    def prefetch(self, asks: Iterable[Ask]) -> None:
        """Ask all of ``asks`` in one batch; RMs that do not answer become dead."""
        todo = list(dict.fromkeys(a for a in asks if a[0] not in self.dead))
        if not todo:
            return
        self.calls += 1
        for ask, answer in zip(todo, self.fetch(todo)):
            if answer is None:
                self._dead(ask[0])
            else:
                self._remember(ask, answer)

    def _dead(self, rm: str) -> None:
        if rm not in self.dead:
            self.dead.add(rm)
            text = f"resource manager {rm} did not answer the estimate in time: left out"
            self.warnings.append(text)
            log.warning("%s", text)

    def _remember(self, ask: Ask, answer: Sequence[Start]) -> list[Start]:
        rm, procs, duration, t = ask
        starts = [(max(whole_second(float(time)), t), dict(alloc)) for time, alloc in answer
                  if float(time) >= t - SLACK_S]
        starts.sort(key=lambda s: s[0])
        self.known.setdefault((rm, int(procs), float(duration)), []).append((t, starts))
        return starts

    def cached(self, rm: str, procs: int, duration: float, t: float) -> list[Start] | None:
        """The earliest start at or after ``t`` if an earlier answer settles it, else None."""
        for asked, starts in self.known.get((rm, int(procs), float(duration)), ()):
            if asked > t:
                continue
            if not starts:
                return []  # never stays never
            if starts[0][0] >= t:
                return [starts[0]]
        return None

    def estimator(self, rm: str) -> Estimator:
        """The planner's estimator for ``rm`` (one single call when memory cannot answer)."""

        def estimate(procs: int, duration: float, t: float) -> list[Any]:
            found = self.cached(rm, procs, duration, t)
            if found is not None:
                return found
            if rm in self.dead:
                return []
            self.calls += 1
            answer = list(self.fetch([(rm, int(procs), float(duration), float(t))]))[0]
            if answer is None:
                self._dead(rm)
                return []
            return self._remember((rm, int(procs), float(duration), float(t)), answer)[:1]

        return estimate

    def estimators(self, rms: Iterable[str]) -> dict[str, Estimator]:
        """Estimators of the RMs still alive, in the given (preference) order."""
        return {rm: self.estimator(rm) for rm in rms if rm not in self.dead}

    def verdict(self, rm: str, procs: int, duration: float, t: float) -> str:
        """What ``rm`` said about a size at ``t``, for error messages."""
        if rm in self.dead:
            return "no answer"
        found = self.cached(rm, procs, duration, t)
        if found is None:
            return "not asked"
        return "never" if not found else f"from {found[0][0]:.0f}"
