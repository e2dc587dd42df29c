"""The job reservations of the conservative pool, indexed for its compression pass.

Each reservation is filed three ways: by job id, in a heap of start times (for the
jobs due to start and the next wake-up), and in a bucket per processor count sorted by
start.  The buckets answer the compression pass's question "which reservations could
use the processors that became free over [a, b)?" without looking at the others:
a reservation for ``n`` processors starting at ``s`` can only move earlier into a
window that covers a point of [a, b) before ``s`` where at least ``n`` are free now;
with tau(n) the first such point, only the reservations of bucket ``n`` starting
after tau(n) can qualify, a suffix of the bucket.  Of those, a window needs a run of
``n`` free processors through such a point that is as long as the walltime or reaches
the reservation's start (its own processors are free from there): the starts up to the
farthest run end are one bisection, the others must have a walltime up to the longest
run (a walltime list beside each bucket answers "none" with one C-level ``min``).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from heapq import heappop, heappush
from itertools import accumulate
from math import inf

from grid_tasks.maui.model import Reservation
from grid_tasks.maui.profile import StepProfile

Key = tuple[float, int, str]  # (submit time, submission sequence, job id): priority order


class ReservationBook:
    """Job reservations of one pool: by id, by start time, by size then start."""

    def __init__(self) -> None:
        self.res: dict[str, Reservation] = {}
        self.sizes: dict[str, int] = {}
        self.walltime: dict[str, float] = {}
        self.starts: list[tuple[float, Key]] = []  # heap; entries of moved reservations go stale
        self.buckets: dict[int, list[tuple[float, Key]]] = {}
        # per size, parallel to the bucket: walltimes, and starts (floats bisect faster)
        self.walls: dict[int, list[float]] = {}
        self.begins: dict[int, list[float]] = {}
        self.needs: list[int] = []  # sizes with a non-empty bucket, ascending

    def __len__(self) -> int:
        return len(self.res)

    def get(self, job_id: str) -> Reservation | None:
        return self.res.get(job_id)

    def add(self, key: Key, need: int, walltime: float, r: Reservation) -> None:
        self.res[key[2]] = r
        self.sizes[key[2]] = need
        self.walltime[key[2]] = walltime
        heappush(self.starts, (r.start, key))
        bucket = self.buckets.get(need)
        if bucket is None:
            bucket = self.buckets[need] = []
            self.walls[need] = []
            self.begins[need] = []
            insort(self.needs, need)
        entry = (r.start, key)
        at = bisect_left(bucket, entry)
        bucket.insert(at, entry)
        self.walls[need].insert(at, walltime)
        self.begins[need].insert(at, r.start)

    def pop(self, key: Key) -> Reservation | None:
        r = self.res.pop(key[2], None)
        if r is None:
            return None
        need = self.sizes.pop(key[2])
        del self.walltime[key[2]]
        bucket = self.buckets[need]
        at = bisect_left(bucket, (r.start, key))
        del bucket[at]
        del self.walls[need][at]
        del self.begins[need][at]
        if not bucket:
            del self.buckets[need]
            del self.walls[need]
            del self.begins[need]
            del self.needs[bisect_left(self.needs, need)]
        return r

    def move(self, key: Key, r: Reservation, start: float, end: float) -> None:
        need = self.sizes[key[2]]
        bucket, walls, begins = self.buckets[need], self.walls[need], self.begins[need]
        at = bisect_left(bucket, (r.start, key))
        del bucket[at]
        del walls[at]
        del begins[at]
        r.start, r.end = start, end
        entry = (start, key)
        at = bisect_left(bucket, entry)
        bucket.insert(at, entry)
        walls.insert(at, self.walltime[key[2]])
        begins.insert(at, start)
        heappush(self.starts, (start, key))

    def due(self, now: float) -> list[Key]:
        """Jobs whose reservation begins by ``now`` (taken off the start heap)."""
        out = []
        starts, res = self.starts, self.res
        while starts and starts[0][0] <= now:
            t, key = heappop(starts)
            r = res.get(key[2])
            if r is not None and r.start == t:
                out.append(key)
        return out

    def next_start(self, now: float) -> float | None:
        """The earliest reservation start after ``now``."""
        starts, res = self.starts, self.res
        while starts:
            t, key = starts[0]
            r = res.get(key[2])
            if r is not None and r.start == t:
                break
            heappop(starts)
        if starts and starts[0][0] > now:
            return starts[0][0]
        later = [r.start for r in res.values() if r.start > now]
        return min(later) if later else None

    def nominate(self, prof: StepProfile, a: float, b: float, now: float, after: Key | None,
                 upto: Key | None, found: dict[Key, float]) -> list[Key]:
        """Reservations (of jobs after ``after`` and before ``upto`` in priority order) that
        the free processors of [a, b) could let move earlier; ``found`` maps each nominated
        key to the latest region end seen for it (a window must begin before it).
        Returns the newly nominated keys.

        A reservation for ``n`` processors is nominated only when a run of at least ``n``
        free processors touching [a, b) before its start could hold it: a run as long as
        its walltime, or one reaching its start (its own processors are free from there)."""
        lo = max(a, now)
        if b <= lo or not self.needs:
            return []
        times, vals = prof.times, prof.vals
        i = bisect_right(times, lo) - 1
        j = bisect_left(times, b, i + 1)
        # most[k]: the most free in [lo, start of segment i + k + 1)
        most = [vals[i]] if j == i + 1 else list(accumulate(vals[i:j], max))
        top = most[-1]
        new: list[Key] = []
        longest = far = inf  # bounds from a smaller size: its runs contain a bigger size's
        for need in self.needs:
            if need > top:
                break  # nowhere in [a, b) that many are free
            k = 0 if most[0] >= need else bisect_left(most, need)
            tau = lo if k == 0 else times[i + k]
            begins = self.begins[need]
            pos = bisect_right(begins, tau)  # the bucket's entries starting after tau
            if pos == len(begins):
                continue
            walls = self.walls[need]
            if far < begins[pos] and longest < min(walls[pos:]):
                continue  # not even the smaller size's runs could hold one of these
            longest, far = _runs(times, vals, i + k, j, need, now, begins[-1])
            # every start up to ``far`` can be reached; after it only a walltime up to ``longest``
            cut = bisect_right(begins, far, pos)
            bucket = self.buckets[need]
            cands = bucket[pos:cut]
            if cut < len(bucket) and min(walls[cut:]) <= longest:
                cands += [bucket[x] for x in range(cut, len(bucket)) if walls[x] <= longest]
            for _, key in cands:
                if (after is not None and key <= after) or (upto is not None and key >= upto):
                    continue
                seen = found.get(key)
                if seen is not None and seen >= b:
                    continue
                if seen is None:
                    new.append(key)
                found[key] = b
        return new

    def held(self) -> list[tuple[Key, Reservation]]:
        return [(key, self.res[key[2]]) for bucket in self.buckets.values() for _, key in bucket]


def _runs(times: list[float], vals: list[float], m: int, j: int, need: int, now: float,
          cap: float) -> tuple[float, float]:
    """The longest run (from ``now`` on) of at least ``need`` free among the runs that
    touch segments ``m`` to ``j - 1`` (segment ``m`` has enough), and the farthest end of
    one; a run reaching ``cap`` counts as endless (no start it could serve lies beyond)."""
    n = len(times)
    while m > 0 and vals[m - 1] >= need and times[m] > now:
        m -= 1
    longest = far = -inf
    while True:
        start = max(times[m], now)
        q = m + 1
        while q < n and vals[q] >= need and times[q] < cap:
            q += 1
        end = inf if q == n or times[q] >= cap else times[q]
        if end - start > longest:
            longest = end - start
        far = end
        if end == inf:
            return longest, far
        while q < j and vals[q] < need:
            q += 1
        if q >= j:
            return longest, far
        m = q
