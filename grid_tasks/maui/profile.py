"""A step function of one free resource over time: the heart of every placement.

``times[i]`` is where segment ``i`` begins; it lasts until ``times[i + 1]`` (the last
segment never ends).  ``vals[i]`` is the amount free during that segment.  Running
jobs, job reservations and administrative reservations all subtract from it over
their half-open interval ``[start, end)``, so "does it fit" is a minimum over a window.
"""

from __future__ import annotations

from bisect import bisect_right
from math import inf


class StepProfile:
    """Free amount of one resource on one node (or pool) as a function of time."""

    __slots__ = ("times", "vals")

    def __init__(self, capacity: float) -> None:
        self.times: list[float] = [-inf]
        self.vals: list[float] = [capacity]

    def copy(self) -> "StepProfile":
        other = StepProfile.__new__(StepProfile)
        other.times = self.times[:]
        other.vals = self.vals[:]
        return other

    def _split(self, t: float) -> int:
        """Index of the segment starting exactly at ``t`` (inserted when needed)."""
        times = self.times
        i = bisect_right(times, t) - 1
        if times[i] == t:
            return i
        times.insert(i + 1, t)
        self.vals.insert(i + 1, self.vals[i])
        return i + 1

    def add(self, start: float, end: float, delta: float) -> None:
        """Add ``delta`` to the free amount over ``[start, end)``."""
        if end <= start or delta == 0:
            return
        i = self._split(start)
        j = self._split(end) if end < inf else len(self.times)
        vals = self.vals
        for k in range(i, j):
            vals[k] += delta

    def value_at(self, t: float) -> float:
        return self.vals[bisect_right(self.times, t) - 1]

    def min_over(self, start: float, end: float) -> float:
        """Smallest free amount anywhere in ``[start, end)``."""
        times, vals = self.times, self.vals
        i = bisect_right(times, start) - 1
        m = vals[i]
        n = len(times)
        i += 1
        while i < n and times[i] < end:
            if vals[i] < m:
                m = vals[i]
            i += 1
        return m

    def earliest(self, start: float, duration: float, need: float) -> float:
        """Earliest ``t >= start`` with at least ``need`` free over ``[t, t + duration)``."""
        times, vals = self.times, self.vals
        n = len(times)
        i = bisect_right(times, start) - 1
        t = start
        while True:
            end = t + duration
            k = i
            ok = True
            while k < n and (k == i or times[k] < end):
                if vals[k] < need:
                    ok = False
                    break
                k += 1
            if ok:
                return t
            # the window failed at segment k: the next chance begins after it
            if k + 1 >= n:
                return inf
            i = k + 1
            t = times[i]

    def earliest_without(self, start: float, duration: float, need: float, limit: float,
                         own: tuple[float, float, float]) -> float:
        """Like :meth:`earliest` but pretending ``own`` = (start, end, amount) is given back,
        and only looking for starts before ``limit`` (returns inf when there is none)."""
        ex_start, ex_end, amount = own
        lo = bisect_right(self.times, start) - 1
        hi = bisect_right(self.times, limit, lo)
        if ex_start >= limit and (hi <= lo or max(self.vals[lo:hi]) < need):
            # never that much free before the limit (``own`` gives back nothing there,
            # as when a reservation tries to move earlier): no start can fit
            return inf
        self._split(ex_start)
        if ex_end < inf:
            self._split(ex_end)
        times, vals = self.times, self.vals
        n = len(times)
        i = bisect_right(times, start) - 1
        t = start
        while t < limit:
            end = t + duration
            k = i
            ok = True
            while k < n and (k == i or times[k] < end):
                v = vals[k]
                if ex_start <= times[k] < ex_end:
                    v += amount
                if v < need:
                    ok = False
                    break
                k += 1
            if ok:
                return t
            if k + 1 >= n:
                return inf
            i = k + 1
            t = times[i]
        return inf

    def increases_after(self, t: float) -> list[float]:
        """Breakpoints after ``t`` where the free amount goes up (candidate start times)."""
        times, vals = self.times, self.vals
        i = bisect_right(times, t)
        return [times[k] for k in range(i, len(times)) if vals[k] > vals[k - 1]]

    def prune(self, now: float) -> None:
        """Forget the past and merge equal neighbours, keeping the profile short."""
        times, vals = self.times, self.vals
        i = bisect_right(times, now) - 1
        nt: list[float] = [-inf]
        nv: list[float] = [vals[i]]
        for k in range(i + 1, len(times)):
            if vals[k] != nv[-1]:
                nt.append(times[k])
                nv.append(vals[k])
        self.times, self.vals = nt, nv

    def segments(self, start: float, end: float) -> list[tuple[float, float, float]]:
        """``(a, b, free)`` pieces covering ``[start, end)``."""
        times, vals = self.times, self.vals
        i = bisect_right(times, start) - 1
        out = []
        a = start
        n = len(times)
        while a < end:
            b = times[i + 1] if i + 1 < n else inf
            b = min(b, end)
            out.append((a, b, vals[i]))
            a = b
            i += 1
        return out
