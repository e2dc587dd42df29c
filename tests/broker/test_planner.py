"""The metascheduling planner: common starts, order, difference sets (hypothesis + Maui)."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import product

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grid_tasks.broker.planner import (
    POLICIES, Need, Placement, PlanningError, Schedule, difference, maui_estimator, plan,
)
from grid_tasks.errors import GridTasksError
from grid_tasks.maui import ACL, Job, Node, Scheduler, SchedulerConfig


@dataclass
class Timeline:
    """A small independent RM model: ``capacity`` processors and busy intervals."""

    name: str
    capacity: int
    busy: list[tuple[float, float, int]] = field(default_factory=list)

    def used(self, t: float) -> int:
        return sum(p for s, e, p in self.busy if s <= t < e)

    def fits(self, procs: int, start: float, duration: float) -> bool:
        points = {start} | {s for s, _, _ in self.busy if start < s < start + duration}
        return all(self.used(t) + procs <= self.capacity for t in points)

    def candidates(self, t0: float) -> list[float]:
        return sorted({t0} | {e for _, e, _ in self.busy if e > t0})

    def estimate(self, procs: int, duration: float, t0: float) -> list[tuple[float, dict[str, int]]]:
        for t in self.candidates(t0):
            if self.fits(procs, t, duration):
                return [(t, {f"{self.name}-n": procs})]
        return []


busy_st = st.lists(st.tuples(st.integers(0, 60), st.integers(1, 40), st.integers(1, 6)), max_size=5)
rm_st = st.tuples(st.integers(2, 8), busy_st)
need_st = st.tuples(st.integers(1, 6), st.integers(1, 30))


def build(rms: list[tuple[int, list]]) -> dict[str, Timeline]:
    out = {}
    for i, (cap, busy) in enumerate(rms):
        name = f"rm{i}"
        kept: list[tuple[float, float, int]] = []
        for s, d, p in busy:  # keep the model itself never overcommitted
            tl = Timeline(name, cap, kept)
            if tl.fits(p, s, d):
                kept.append((s, s + d, p))
        out[name] = Timeline(name, cap, kept)
    return out


def merged_fits(timelines: dict[str, Timeline], needs: list[Need], sched: Schedule) -> bool:
    per_rm: dict[str, list[Placement]] = {}
    for p in sched.placements:
        per_rm.setdefault(p.rm, []).append(p)
    for rm, ps in per_rm.items():
        procs = sum(needs[p.subjob].procs for p in ps)
        if not timelines[rm].fits(procs, sched.start, max(p.duration for p in ps)):
            return False
    return True


def brute_earliest(timelines: dict[str, Timeline], needs: list[Need], now: float) -> float | None:
    """The earliest common start over every assignment, by trying every event time."""
    times = sorted({now} | {e for tl in timelines.values() for _, e, _ in tl.busy if e > now})
    best = None
    for choice in product(timelines, repeat=len(needs)):
        for t in times:
            per: dict[str, tuple[int, float]] = {}
            for need, rm in zip(needs, choice):
                procs, dur = per.get(rm, (0, 0.0))
                per[rm] = (procs + need.procs, max(dur, need.duration))
            if all(timelines[rm].fits(p, t, d) for rm, (p, d) in per.items()):
                best = t if best is None else min(best, t)
                break
    return best


@settings(max_examples=60, deadline=None)
@given(rms=st.lists(rm_st, min_size=1, max_size=3), raw=st.lists(need_st, min_size=1, max_size=3),
       now=st.integers(0, 30), policy=st.sampled_from(sorted(POLICIES)))
def test_common_start_is_feasible_earliest_and_ordered(rms, raw, now, policy) -> None:
    timelines = build(rms)
    needs = [Need(p, float(d)) for p, d in raw]
    estimators = {name: tl.estimate for name, tl in timelines.items()}
    schedules = plan(needs, estimators, now, policy=policy, limit=5)
    expected = brute_earliest(timelines, needs, now)
    if expected is None:
        assert schedules == []
        return
    assert schedules and schedules[0].start == expected
    assert len(schedules) <= 5
    rank = {rm: i for i, rm in enumerate(estimators)}
    keys = [POLICIES[policy]().key(s, rank) for s in schedules]
    assert keys == sorted(keys)
    seen = set()
    for sched in schedules:
        assert sched.start >= now
        assert [p.subjob for p in sched.placements] == list(range(len(needs)))
        assert all(p.start == sched.start for p in sched.placements)
        assert all(p.duration == n.duration and p.procs == n.procs
                   for p, n in zip(sched.placements, needs))
        assert merged_fits(timelines, needs, sched)
        for rm in sched.rms:  # and per the RM's own estimator, asked at the common start
            mine = [needs[p.subjob] for p in sched.placements if p.rm == rm]
            answer = estimators[rm](sum(n.procs for n in mine), max(n.duration for n in mine),
                                    sched.start)
            assert answer and answer[0][0] == sched.start
        choice = tuple(p.rm for p in sched.placements)
        assert choice not in seen  # one schedule per assignment
        seen.add(choice)


placement_st = st.builds(Placement, subjob=st.integers(0, 3), rm=st.sampled_from(["a", "b", "c"]),
                         start=st.sampled_from([0.0, 10.0]), duration=st.sampled_from([5.0, 7.0]),
                         nodes=st.sampled_from([(("n1", 1),), (("n2", 2),)]))
schedule_st = st.builds(lambda ps: Schedule(ps[0].start if ps else 0.0, tuple(ps)),
                        st.lists(placement_st, min_size=1, max_size=4))


@settings(max_examples=150, deadline=None)
@given(old=st.one_of(st.none(), schedule_st), new=schedule_st)
def test_difference_keeps_exactly_the_unchanged_placements(old, new) -> None:
    diff = difference(old, new)
    old_ps = list(old.placements) if old else []
    assert sorted(map(repr, diff.keep + diff.acquire)) == sorted(map(repr, new.placements))
    assert sorted(map(repr, diff.keep + diff.release)) == sorted(map(repr, old_ps))
    for p in diff.acquire:
        assert p not in diff.release
    # keep is as large as the multiset intersection
    common = sum(min(old_ps.count(p), new.placements.count(p)) for p in set(new.placements))
    assert len(diff.keep) == common


def test_difference_after_moving_one_subjob() -> None:
    a = Placement(0, "A", 10.0, 5.0, (("a1", 2),))
    b = Placement(1, "B", 10.0, 5.0, (("b1", 1),))
    c = Placement(1, "C", 10.0, 5.0, (("c1", 1),))
    diff = difference(Schedule(10.0, (a, b)), Schedule(10.0, (a, c)))
    assert diff.keep == (a,) and diff.release == (b,) and diff.acquire == (c,)
    assert difference(None, Schedule(10.0, (a, c))).acquire == (a, c)


def test_tie_policies_differ_on_distinct_rms() -> None:
    free = {rm: Timeline(rm, 8).estimate for rm in ("A", "B")}
    needs = [Need(1, 10.0), Need(1, 10.0)]
    packed = plan(needs, free, 0.0, policy="earliest")
    spread = plan(needs, free, 0.0, policy="spread")
    assert packed[0].rms == ("A",) and len(packed) == 4
    assert len(spread[0].rms) == 2 and spread[0].rms == ("A", "B")
    assert {s.start for s in packed + spread} == {0.0}
    assert plan(needs, free, 0.0, limit=1) == packed[:1]


def test_restrictions_and_requirements_choose_rms() -> None:
    free = {rm: Timeline(rm, 8).estimate for rm in ("A", "B", "C")}
    out = plan([Need(2, 5.0, rms=frozenset({"B", "C"}), matching=frozenset({"C", "A"}))], free, 3.0)
    assert [s.rms for s in out] == [("C",)]
    out = plan([{"procs": 1, "duration": 4, "rms": "B"}], free, 0.0)
    assert out[0].placements[0].rm == "B"


def test_coallocation_waits_for_the_later_cluster() -> None:
    a = Timeline("A", 4, [(0, 100, 4)])
    b = Timeline("B", 2, [(0, 50, 2), (100, 130, 2)])
    out = plan([Need(2, 10.0, rms={"A"}), Need(2, 10.0, rms={"B"})],
               {"A": a.estimate, "B": b.estimate}, 0.0)
    # A is free from 100, B from 50 but reserved 100..130: the common start is 130
    assert [s.start for s in out] == [130.0]


def test_never_startable_gives_no_schedule() -> None:
    small = {"A": Timeline("A", 2).estimate}
    assert plan([Need(3, 1.0)], small, 0.0) == []


@pytest.mark.parametrize("needs, message", [
    ([], "at least one subjob"),
    ([Need(1, 1.0, rms={"Z"})], "no known resource manager"),
    ([{"procs": 1, "duration": 1, "queue": "x"}], "unknown need fields"),
    ([{"procs": 0, "duration": 1}], "at least one processor"),
    ([{"procs": 1, "duration": -2}], "must be positive"),
    (["2 procs"], "a need is a Need or a mapping"),
])
def test_bad_needs_are_typed_errors(needs, message) -> None:
    with pytest.raises(PlanningError, match=message) as info:
        plan(needs, {"A": Timeline("A", 2).estimate}, 0.0)
    assert isinstance(info.value, GridTasksError)


def test_bad_estimators_and_arguments_are_typed_errors() -> None:
    with pytest.raises(PlanningError, match="before the asked time"):
        plan([Need(1, 1.0)], {"A": lambda p, d, t: [(t - 1, {"n": p})]}, 5.0)
    with pytest.raises(PlanningError, match="expected"):
        plan([Need(1, 1.0)], {"A": lambda p, d, t: [42]}, 5.0)
    with pytest.raises(PlanningError, match="unknown tie policy"):
        plan([Need(1, 1.0)], {"A": Timeline("A", 2).estimate}, 0.0, policy="random")
    with pytest.raises(PlanningError, match="limit"):
        plan([Need(1, 1.0)], {"A": Timeline("A", 2).estimate}, 0.0, limit=0)


def test_plans_over_real_maui_cores_respect_their_reservations() -> None:
    a = Scheduler([Node("a1", 4), Node("a2", 4)], SchedulerConfig.preset("easy"))
    b = Scheduler([Node("b1", 2)], SchedulerConfig.preset("easy"))
    a.submit(Job("x", tasks=8, walltime=100), 0.0)
    assert [s.job_id for s in a.iterate(0.0).started] == ["x"]
    b.reserve(Job("other", tasks=2), 100.0, 30.0, ACL(jobs=frozenset({"other"})), 0.0)
    estimators = {"A": maui_estimator(a), "B": maui_estimator(b)}
    out = plan([Need(6, 20.0, rms={"A"}), Need(2, 20.0, rms={"B"})], estimators, 0.0)
    assert out[0].start == 130.0
    assert sum(p for _, p in out[0].placements[0].nodes) == 6
    # the job the reservation is bound to may use it
    mine = {"A": maui_estimator(a), "B": maui_estimator(b, job_id="other")}
    assert plan([Need(2, 120.0, rms={"B"})], mine, 0.0)[0].start == 0.0
    assert plan([Need(2, 120.0, rms={"B"})], estimators, 0.0)[0].start == 130.0
    # reserving each placement of the plan succeeds on the real cores
    for p in out[0].placements:
        core = a if p.rm == "A" else b
        core.reserve(Job(f"g{p.subjob}", tasks=p.procs), p.start, p.duration,
                     ACL(jobs=frozenset({f"g{p.subjob}"})), 0.0)


core_jobs_st = st.lists(st.tuples(st.integers(1, 8), st.integers(1, 200)), max_size=6)


@settings(max_examples=40, deadline=None)
@given(loads=st.lists(core_jobs_st, min_size=2, max_size=3),
       raw=st.lists(st.tuples(st.integers(1, 8), st.integers(1, 100)), min_size=1, max_size=2))
def test_every_placement_of_every_schedule_can_be_reserved_on_maui_cores(loads, raw) -> None:
    """Estimate (Maui) -> plan -> reserve agree: no schedule is refused by its cores."""
    for rank in range(8):
        cores = {}
        for i, jobs in enumerate(loads):
            core = Scheduler([Node(f"n{i}a", 4), Node(f"n{i}b", 4)], SchedulerConfig.preset("easy"))
            for k, (procs, wall) in enumerate(jobs):
                core.submit(Job(f"j{k}", tasks=procs, walltime=float(wall)), 0.0)
            core.iterate(0.0)
            cores[f"rm{i}"] = core
        needs = [Need(p, float(d)) for p, d in raw]
        schedules = plan(needs, {n: maui_estimator(c) for n, c in cores.items()}, 0.0, limit=8)
        if rank >= len(schedules):
            break
        for p in schedules[rank].placements:  # one reservation per placement, as an enactor does
            name = f"g{p.subjob}"
            cores[p.rm].reserve(Job(name, tasks=p.procs), p.start, p.duration,
                                ACL(jobs=frozenset({name})), 0.0)


def test_the_planner_and_the_grid_simulation_stay_pure() -> None:
    import subprocess
    import sys

    code = (
        "import sys, grid_tasks.broker.planner, grid_tasks.sim.grid, grid_tasks.sim.grid_policies;"
        "print(sorted(m for m in ('celery', 'redis', 'sqlalchemy', 'kombu') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    source = __import__("inspect").getsource(__import__("grid_tasks.broker.planner").broker.planner)
    assert "time.time" not in source and "datetime" not in source  # never reads the clock
