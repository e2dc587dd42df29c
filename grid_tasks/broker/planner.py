"""The metascheduling planner (pure): ordered candidate schedules with a common start.

Seed 002 (Kovalenko & Orlov) asks every cluster two things: *estimate* when a request
could start and *reserve* resources for one job.  Seed 000 (Legion) has the scheduler
hand the enactor an ordered list of candidate schedules.  This module is the planning
half: given one :class:`Need` per subjob and one estimator per resource manager (RM),
:func:`plan` returns candidate :class:`Schedule` objects in which every subjob starts at
the **same instant** on its RM, earliest first.  It never reads the clock, never talks
to Redis, Celery or SQL: estimators are plain callables.

Estimator contract
    ``estimators[rm](procs, duration, t)`` returns the RM's possible starts **at or
    after** ``t`` for ``procs`` processors held ``duration`` seconds, earliest first,
    each a :class:`~grid_tasks.maui.StartEstimate` or a ``(time, {node: procs})`` pair;
    an empty result means "never".  The planner calls it with ``t = now`` and then with
    later times while it looks for a common start, so ``t`` means "not before" (for the
    Maui core: ``Scheduler.estimate`` with ``now=t``; see :func:`maui_estimator`).

Common start
    For one assignment of subjobs to RMs the planner iterates ``t := max over RMs of
    earliest(rm, t)`` from the assignment's lower bound until every RM answers ``t``
    itself: the earliest instant at which every chosen RM can start its part (exact when
    estimators return their earliest start).  Subjobs on one RM are asked for together
    (processors summed, longest duration), then share the allocation in node order.

Candidates and order
    Assignments are explored best-first by their lower bound (the latest of the
    subjobs' own earliest starts): the ``limit`` earliest schedules are found without
    enumerating every combination (at most :data:`MAX_ASSIGNMENTS` tried), one schedule
    per assignment.  Order: start time, then the tie policy (:data:`POLICIES`):
    ``earliest`` prefers fewer distinct RMs (less to coordinate), then the earliest
    finish, then the RMs' order in ``estimators`` (the caller's preference); ``spread``
    prefers more distinct RMs (load spread), then the same keys.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grid_tasks.broker.ties import POLICIES, EarliestTies, SpreadTies, TiePolicy
from grid_tasks.errors import GridTasksError
from grid_tasks.maui import Job

__all__ = ["Need", "Placement", "Schedule", "ScheduleDiff", "PlanningError", "TiePolicy",
           "EarliestTies", "SpreadTies", "POLICIES", "MAX_ASSIGNMENTS", "MAX_ROUNDS",
           "plan", "difference", "maui_estimator", "Estimator"]

#: assignments of subjobs to RMs tried at most per plan() call
MAX_ASSIGNMENTS = 4096
#: fixed-point rounds before an assignment is declared without common start
MAX_ROUNDS = 64

Estimator = Callable[[int, float, float], Sequence[Any]]


class PlanningError(GridTasksError):
    """A planning request that cannot be understood (bad need, unknown RM, bad estimate)."""


@dataclass(frozen=True)
class Need:
    """What one subjob needs: ``procs`` processors for ``duration`` seconds.

    ``rms`` restricts it to those RMs (``None``: any); ``matching`` is the set of RMs a
    MIL ``requirements`` relation matched, already resolved by the caller (``None``: no
    requirement).  The subjob may go to any RM in both sets that has an estimator.
    """

    procs: int
    duration: float
    rms: frozenset[str] | None = None
    matching: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.procs, bool) or not isinstance(self.procs, int) or self.procs < 1:
            raise PlanningError(f"a need asks for at least one processor, got {self.procs!r}")
        if not isinstance(self.duration, (int, float)) or not self.duration > 0:
            raise PlanningError(f"a need's duration must be positive, got {self.duration!r}")
        for name in ("rms", "matching"):
            value = getattr(self, name)
            if value is not None:
                if isinstance(value, str):
                    value = (value,)
                object.__setattr__(self, name, frozenset(value))

    def allowed(self, known: Sequence[str]) -> list[str]:
        """The RMs of ``known`` (kept in that order) this subjob may run on."""
        return [rm for rm in known
                if (self.rms is None or rm in self.rms)
                and (self.matching is None or rm in self.matching)]


@dataclass(frozen=True)
class Placement:
    """Subjob ``subjob`` on ``rm`` from ``start`` for ``duration``, on ``nodes`` (node, procs)."""

    subjob: int
    rm: str
    start: float
    duration: float
    nodes: tuple[tuple[str, int], ...]

    @property
    def end(self) -> float:
        """When the subjob's duration is over."""
        return self.start + self.duration

    @property
    def procs(self) -> int:
        """Processors over all its nodes."""
        return sum(p for _, p in self.nodes)


@dataclass(frozen=True)
class Schedule:
    """One candidate: every subjob placed, all starting at ``start``."""

    start: float
    placements: tuple[Placement, ...]

    @property
    def end(self) -> float:
        """When the last subjob's duration is over."""
        return max(p.end for p in self.placements)

    @property
    def rms(self) -> tuple[str, ...]:
        """The distinct RMs used, in subjob order."""
        return tuple(dict.fromkeys(p.rm for p in self.placements))


@dataclass(frozen=True)
class ScheduleDiff:
    """Going from one schedule to the next: keep, release and newly acquire placements."""

    keep: tuple[Placement, ...]
    release: tuple[Placement, ...]
    acquire: tuple[Placement, ...]


def difference(old: Schedule | None, new: Schedule) -> ScheduleDiff:
    """What changes from ``old`` to ``new`` (Legion's difference sets).

    A placement is kept only when ``new`` holds an identical one (same subjob, RM,
    start, duration and nodes), so its reservation token need not be touched; every
    other placement of ``old`` is released and every other one of ``new`` acquired.
    """
    if old is None:
        return ScheduleDiff((), (), tuple(new.placements))
    remaining = list(old.placements)
    keep: list[Placement] = []
    acquire: list[Placement] = []
    for p in new.placements:
        if p in remaining:
            remaining.remove(p)
            keep.append(p)
        else:
            acquire.append(p)
    return ScheduleDiff(tuple(keep), tuple(remaining), tuple(acquire))


def _policy(policy: str | TiePolicy) -> TiePolicy:
    if isinstance(policy, TiePolicy):
        return policy
    try:
        return POLICIES[policy]()
    except (KeyError, TypeError):
        raise PlanningError(f"unknown tie policy {policy!r} (known: {', '.join(POLICIES)})") from None


# ---- estimates --------------------------------------------------------------------------
class _Estimates:
    """Memoized, checked calls to the estimators."""

    def __init__(self, estimators: Mapping[str, Estimator]) -> None:
        self.estimators = estimators
        self.cache: dict[tuple[str, int, float, float], tuple[float, dict[str, int]] | None] = {}

    def earliest(self, rm: str, procs: int, duration: float, t: float) -> tuple[float, dict[str, int]] | None:
        """The RM's first possible start at or after ``t`` (with allocation), or None."""
        key = (rm, procs, duration, t)
        if key not in self.cache:
            self.cache[key] = self._ask(rm, procs, duration, t)
        return self.cache[key]

    def _ask(self, rm: str, procs: int, duration: float, t: float) -> tuple[float, dict[str, int]] | None:
        answers = self.estimators[rm](procs, duration, t)
        best: tuple[float, dict[str, int]] | None = None
        for answer in answers or ():
            time, alloc = _unpack(rm, answer)
            if time < t:
                raise PlanningError(f"estimator of {rm!r} answered start {time:g}, before the "
                                    f"asked time {t:g}")
            if best is None or time < best[0]:
                best = (time, alloc)
        return best


def _unpack(rm: str, answer: Any) -> tuple[float, dict[str, int]]:
    if hasattr(answer, "time") and hasattr(answer, "allocation"):
        time, alloc = answer.time, answer.allocation
    else:
        try:
            time, alloc = answer
        except (TypeError, ValueError):
            raise PlanningError(f"estimator of {rm!r} gave {answer!r}; expected (time, "
                                "{node: procs}) or a StartEstimate") from None
    if not isinstance(time, (int, float)):
        raise PlanningError(f"estimator of {rm!r} gave a non-numeric start {time!r}")
    return float(time), {str(n): int(p) for n, p in dict(alloc).items()}


# ---- planning ---------------------------------------------------------------------------
def _coerce_need(index: int, need: Any) -> Need:
    """A :class:`Need` from a Need or a mapping of its fields (typed error otherwise)."""
    if isinstance(need, Need):
        return need
    if isinstance(need, Mapping):
        unknown = set(need) - {"procs", "duration", "rms", "matching"}
        if unknown:
            raise PlanningError(f"subjob {index}: unknown need fields {sorted(unknown)}")
        try:
            return Need(**need)
        except TypeError as exc:
            raise PlanningError(f"subjob {index}: {exc}") from None
    raise PlanningError(f"subjob {index}: a need is a Need or a mapping, got {type(need).__name__}")


def plan(needs: Iterable[Need | Mapping[str, Any]], estimators: Mapping[str, Estimator], now: float,
         *, policy: str | TiePolicy = "earliest", limit: int = 8) -> list[Schedule]:
    """Candidate schedules for a (possibly coallocated) job, best first.

    ``needs`` has one entry per subjob (a :class:`Need` or a mapping of its fields);
    subjob ``i`` of every schedule is ``needs[i]``.  Returns at most ``limit``
    schedules, each with one common start ``>= now`` (see the module docstring for the
    order); an empty list when no assignment can ever start.  Raises
    :class:`PlanningError` for malformed needs, a subjob no known RM may take, or an
    estimator breaking its contract.
    """
    needs = [_coerce_need(i, n) for i, n in enumerate(needs)]
    if not needs:
        raise PlanningError("plan() needs at least one subjob")
    if limit < 1:
        raise PlanningError(f"limit must be at least 1, got {limit}")
    tie = _policy(policy)
    known = list(estimators)
    rank = {rm: i for i, rm in enumerate(known)}
    est = _Estimates(estimators)
    options = _options(needs, known, est, now)
    if options is None:
        return []
    found: list[Schedule] = []
    for lower, choice in _assignments(options):
        if len(found) >= limit and lower > found[limit - 1].start:
            break
        schedule = _schedule(needs, choice, lower, est)
        if schedule is not None:
            found.append(schedule)
            found.sort(key=lambda s: tie.key(s, rank))
    return found[:limit]


def _options(needs: list[Need], known: list[str], est: _Estimates,
             now: float) -> list[list[tuple[float, str]]] | None:
    """Per subjob: (own earliest start, rm) for every RM that could ever take it, sorted."""
    options = []
    for i, need in enumerate(needs):
        allowed = need.allowed(known)
        if not allowed:
            wanted = sorted(need.rms or ()) or sorted(need.matching or ())
            raise PlanningError(f"subjob {i}: no known resource manager may take it "
                                f"(allowed {wanted or 'none'}; known {known or 'none'})")
        row = []
        for rm in allowed:
            first = est.earliest(rm, need.procs, float(need.duration), now)
            if first is not None:
                row.append((first[0], rm))
        if not row:
            return None
        row.sort(key=lambda item: item[0])  # stable: ties keep the caller's RM order
        options.append(row)
    return options


def _assignments(options: list[list[tuple[float, str]]]) -> Iterable[tuple[float, tuple[str, ...]]]:
    """Assignments of subjobs to RMs by increasing lower bound (best-first product)."""
    start = (0,) * len(options)

    def bound(idx: tuple[int, ...]) -> float:
        return max(options[j][k][0] for j, k in enumerate(idx))

    heap = [(bound(start), start)]
    seen = {start}
    tried = 0
    while heap and tried < MAX_ASSIGNMENTS:
        lower, idx = heapq.heappop(heap)
        tried += 1
        yield lower, tuple(options[j][k][1] for j, k in enumerate(idx))
        for j in range(len(idx)):
            if idx[j] + 1 < len(options[j]):
                nxt = idx[:j] + (idx[j] + 1,) + idx[j + 1:]
                if nxt not in seen:
                    seen.add(nxt)
                    heapq.heappush(heap, (bound(nxt), nxt))


def _schedule(needs: list[Need], choice: tuple[str, ...], lower: float,
              est: _Estimates) -> Schedule | None:
    """The earliest common start of one assignment (fixed point), or None."""
    groups: dict[str, list[int]] = {}
    for i, rm in enumerate(choice):
        groups.setdefault(rm, []).append(i)
    asks = {rm: (sum(needs[i].procs for i in idx), float(max(needs[i].duration for i in idx)))
            for rm, idx in groups.items()}
    t = lower
    allocs: dict[str, dict[str, int]] = {}
    for _ in range(MAX_ROUNDS):
        moved = False
        for rm, (procs, duration) in asks.items():
            answer = est.earliest(rm, procs, duration, t)
            if answer is None:
                return None
            if answer[0] > t:
                t, moved = answer[0], True
            allocs[rm] = answer[1]
        if not moved:
            break
    else:
        return None
    placements: list[Placement | None] = [None] * len(needs)
    for rm, idx in groups.items():
        for i, nodes in zip(idx, _split(allocs[rm], [needs[k].procs for k in idx]), strict=True):
            placements[i] = Placement(i, rm, t, float(needs[i].duration), nodes)
    return Schedule(t, tuple(placements))  # type: ignore[arg-type]


def _split(alloc: Mapping[str, int], sizes: list[int]) -> list[tuple[tuple[str, int], ...]]:
    """Share one RM's allocation between its subjobs, in node order."""
    if len(sizes) == 1:
        return [tuple(alloc.items())]
    pool = list(alloc.items())
    out = []
    for n, size in enumerate(sizes):
        if n == len(sizes) - 1:
            out.append(tuple((node, p) for node, p in pool if p > 0))
            break
        mine: list[tuple[str, int]] = []
        while size > 0 and pool:
            node, free = pool[0]
            take = min(free, size)
            mine.append((node, take))
            size -= take
            if take == free:
                pool.pop(0)
            else:
                pool[0] = (node, free - take)
        out.append(tuple(mine))
    return out


def maui_estimator(scheduler: Any, *, job_id: str = "plan", limit: int = 1,
                   **job_fields: Any) -> Estimator:
    """An estimator over a :class:`grid_tasks.maui.Scheduler` (one processor per task).

    ``job_fields`` go to the probe :class:`grid_tasks.maui.Job` (user, group, ...) so the
    core applies the same reservations ACLs the real job would meet.
    """
    def estimate(procs: int, duration: float, t: float) -> list[Any]:
        probe = Job(id=job_id, tasks=procs, procs_per_task=1, walltime=duration, submit_time=t,
                    **job_fields)
        return scheduler.estimate(probe, t, limit=limit)

    return estimate
