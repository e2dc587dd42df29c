"""Grid metascheduling by simulation: selection, reservations, coallocation, invariants."""

from __future__ import annotations

import pytest

from grid_tasks.sim.conventions import SimJob
from grid_tasks.sim.grid import (
    GRID_POLICIES, GridError, GridJob, GridOptions, GridWorkload, PolicyRun, load_workload,
    select,
)
from grid_tasks.sim.grid_policies import run_policy
from grid_tasks.sim.replay import ClusterSpec
from tests.sim.conftest import trace_path


def job(jid: str, submit: float, estimate: float, runtime: float, procs: int) -> SimJob:
    return SimJob(jid, submit, estimate, runtime, procs)


def workload(procs: dict[str, int], local: dict[str, list[SimJob]], grid: list[GridJob],
             **options: float) -> GridWorkload:
    return GridWorkload(procs, {n: local.get(n, []) for n in procs}, grid, GridOptions(**options))


def assert_never_overcommitted(run: PolicyRun) -> None:
    """At every start instant, each core's running processors fit its size."""
    by_core: dict[str, list[SimJob]] = {}
    for j in run.busy_jobs():
        by_core.setdefault(j.cluster, []).append(j)
    assert set(by_core) <= set(run.cores)
    for core, jobs in by_core.items():
        for t in {j.start for j in jobs}:
            used = sum(j.procs for j in jobs if j.start <= t < j.end)
            assert used <= run.cores[core], f"{core} overcommitted at {t}: {used}"
    for name, procs in run.procs.items():  # and every physical cluster as a whole
        parts = [c for c, phys in run.physical.items() if phys == name]
        assert sum(run.cores[c] for c in parts) == procs


def assert_reservations_kept(run: PolicyRun) -> None:
    for g in run.grid:
        for p in g.parts:
            if p.id not in g.reserved:
                continue
            at = g.reserved[p.id][1]
            if g.early_start:
                assert p.start <= at
            else:
                assert p.start == at, f"{p.id} started at {p.start}, reserved at {at}"
        if g.coallocated and g.started:
            assert len({p.start for p in g.parts}) == 1
            assert len({p.cluster for p in g.parts}) == 2


# ---- selection --------------------------------------------------------------------------
def many(name: str, n: int) -> list[SimJob]:
    return [job(f"{i}", i * 10.0, 100.0, 50.0, 1 + i % 8) for i in range(n)]


def test_selection_is_deterministic_in_the_seed() -> None:
    clusters = {"A": many("A", 600), "B": many("B", 600)}
    procs = {"A": 64, "B": 32}
    one = select(clusters, procs, GridOptions(grid_share=0.2, seed=7))
    two = select(clusters, procs, GridOptions(grid_share=0.2, seed=7))
    other = select(clusters, procs, GridOptions(grid_share=0.2, seed=8))
    ids = [g.id for g in one.grid]
    assert ids == [g.id for g in two.grid] and ids != [g.id for g in other.grid]
    assert [(g.coallocated, g.early_start) for g in one.grid] == \
        [(g.coallocated, g.early_start) for g in two.grid]
    assert 170 <= len(ids) <= 310  # about 20% of 1200
    assert len(one.grid) + sum(map(len, one.local.values())) == 1200
    coalloc = [g for g in one.grid if g.coallocated]
    assert 0 < len(coalloc) < len(one.grid)
    assert all(g.procs >= 2 and not g.early_start for g in coalloc)
    assert all(sum(g.sizes()) == g.procs and min(g.sizes()) >= 1 for g in coalloc)
    assert [g.submit for g in one.grid] == sorted(g.submit for g in one.grid)


def test_one_cluster_has_no_coallocation() -> None:
    chosen = select({"A": many("A", 300)}, {"A": 64}, GridOptions(grid_share=0.5, coalloc_share=1))
    assert chosen.grid and not any(g.coallocated for g in chosen.grid)


@pytest.mark.parametrize("options", [{"grid_share": 1.5}, {"coalloc_share": -0.1},
                                     {"slice": 0.0}, {"slice": 1.0}, {"early_share": 2}])
def test_bad_options_are_typed_errors(options) -> None:
    with pytest.raises(GridError, match="must be"):
        GridOptions(**options)


def test_unknown_policy_is_a_typed_error() -> None:
    with pytest.raises(GridError, match="unknown grid policy"):
        run_policy(workload({"A": 4}, {}, []), "random")


# ---- hand-made workloads ------------------------------------------------------------------
def busy_pair(early: bool) -> GridWorkload:
    """A: 4 procs held (walltime 100) by a job that ends at 10; B: 4 procs busy until 200."""
    return workload({"A": 4, "B": 4},
                    {"A": [job("1", 0, 100, 10, 4)], "B": [job("3", 0, 200, 200, 4)]},
                    [GridJob("A:2", "A", 1.0, 50.0, 20.0, 4, early_start=early)])


def test_early_start_allowed_uses_resources_freed_before_the_reservation() -> None:
    run = run_policy(busy_pair(early=True), "reserve")
    part = run.grid[0].parts[0]
    assert run.grid[0].reserved[part.id] == ("A", 100.0)
    assert (part.cluster, part.start, part.end) == ("A", 10.0, 30.0)
    assert run.metrics()["grid"]["started_early"] == 1
    assert_never_overcommitted(run)


def test_early_start_forbidden_waits_for_the_reservation() -> None:
    run = run_policy(busy_pair(early=False), "reserve")
    part = run.grid[0].parts[0]
    assert (part.cluster, part.start) == ("A", 100.0)
    assert run.metrics()["grid"]["started_early"] == 0
    assert_reservations_kept(run)


def coalloc_workload() -> GridWorkload:
    """A busy until 100, B until 300 (walltimes), but B's job ends at 50."""
    return workload({"A": 8, "B": 4},
                    {"A": [job("1", 0, 100, 100, 8)], "B": [job("2", 0, 300, 50, 4)]},
                    [GridJob("A:9", "A", 5.0, 40.0, 40.0, 6, coallocated=True),
                     GridJob("B:7", "B", 6.0, 30.0, 30.0, 9)])


def test_reserve_coallocates_at_one_common_start() -> None:
    run = run_policy(coalloc_workload(), "reserve")
    co, wide = run.grid
    assert sorted((p.cluster, p.procs) for p in co.parts) == [("A", 3), ("B", 3)]
    # reserved at 300 (B's walltime); B freeing early at 50 does not move coallocated halves
    assert {p.start for p in co.parts} == {300.0}
    assert wide.refused == "no cluster can ever hold it" and not wide.parts
    assert_reservations_kept(run)
    assert_never_overcommitted(run)
    metrics = run.metrics()
    assert metrics["grid"]["refused"] == 1 and metrics["grid"]["coalloc_max_skew_s"] == 0


def test_least_loaded_costarts_halves_when_both_can_start_now() -> None:
    run = run_policy(coalloc_workload(), "least-loaded")
    co = run.grid[0]
    # nothing reserved ahead: the halves start together once A (100) and B (50) are both free
    assert {p.start for p in co.parts} == {100.0}
    assert {p.cluster for p in co.parts} == {"A", "B"}
    assert_never_overcommitted(run)


def test_least_loaded_places_single_jobs_on_the_least_loaded_cluster() -> None:
    wl = workload({"A": 8, "B": 8, "C": 8},
                  {"A": [job("1", 0, 100, 100, 8)], "B": [job("2", 0, 100, 100, 2)],
                   "C": [job("3", 0, 100, 100, 4)]},
                  [GridJob("A:5", "A", 1.0, 10.0, 10.0, 2), GridJob("C:6", "C", 2.0, 10.0, 10.0, 4)])
    run = run_policy(wl, "least-loaded")
    # B is least loaded (2/8); then B and C both hold 4/8 and the tie goes to the home cluster
    assert [(g.parts[0].cluster, g.parts[0].start) for g in run.grid] == [("B", 1.0), ("C", 2.0)]


def test_slice_keeps_grid_and_local_jobs_apart() -> None:
    local = {"A": [job(f"{i}", i, 50, 40, 3) for i in range(6)],
             "B": [job(f"{i}", i, 50, 40, 2) for i in range(6)] + [job("wide", 0, 10, 10, 4)]}
    grid = [GridJob("A:g", "A", 2.0, 30.0, 30.0, 1), GridJob("B:h", "B", 3.0, 30.0, 30.0, 2,
                                                                coallocated=True)]
    with_grid = run_policy(workload({"A": 4, "B": 4}, local, grid, slice=0.25), "slice")
    alone = run_policy(workload({"A": 4, "B": 4}, local, [], slice=0.25), "slice")
    assert with_grid.cores == {"A": 3, "A/grid": 1, "B": 3, "B/grid": 1}
    # local jobs outside the slice do not see the grid jobs at all
    assert [(j.cluster, j.start) for j in with_grid.local] == [(j.cluster, j.start) for j in alone.local]
    assert all(p.cluster.endswith("/grid") for g in with_grid.grid for p in g.parts)
    assert with_grid.refused_local == 1  # 4 procs never fit the 3 left outside the slice
    assert_never_overcommitted(with_grid)
    assert_reservations_kept(with_grid)
    metrics = with_grid.metrics()
    assert metrics["local"]["refused"] == 1 and metrics["unfinished"] == 0
    assert 0 < metrics["slice_utilization"] <= 1


# ---- the shared traces --------------------------------------------------------------------
@pytest.fixture(scope="module")
def traces_workload() -> GridWorkload:
    specs = [ClusterSpec(trace_path("KTH-SP2")), ClusterSpec(trace_path("SDSC-SP2"))]
    return load_workload(specs, GridOptions(grid_share=0.2, coalloc_share=0.4, seed=3), first=300)


@pytest.mark.parametrize("policy", GRID_POLICIES)
def test_invariants_on_trace_slices(traces_workload, policy) -> None:
    run = run_policy(traces_workload, policy)
    metrics = run.metrics()
    assert_never_overcommitted(run)
    assert_reservations_kept(run)
    assert metrics["unfinished"] == 0
    assert metrics["grid"]["coalloc_max_skew_s"] == 0
    assert metrics["grid"]["coallocated"] > 0
    started = [g for g in run.grid if g.refused is None]
    assert all(g.started and min(p.start for p in g.parts) >= g.submit for g in started)
    assert metrics["local"]["jobs"] + metrics["local"]["refused"] == \
        sum(len(v) for v in traces_workload.local.values())
    assert 0 < metrics["utilization_grid"] < metrics["utilization"] <= 1
    assert run_policy(traces_workload, policy).metrics() == metrics  # deterministic
