"""Honest comparisons: metrics on the jobs every policy finished, unfinished counted."""

from __future__ import annotations

from pathlib import Path

import pytest

from grid_tasks.sim.compare import basis_line, compare, job_key
from grid_tasks.sim.metrics import summarize
from grid_tasks.sim.replay import ClusterSpec, Replay, ReplayResult
from tests.sim.conftest import swf_line, write_swf


def trace(path: Path) -> Path:
    """Three users on 16 processors; user 2 runs the big jobs a MAXPROC=8 throttle blocks."""
    lines = [swf_line(i, 40 * i, 200 + 37 * (i % 5), 12 if i % 4 == 0 else 1 + i % 6,
                      req_time=900, user=2 if i % 4 == 0 else 1 + i % 3)
             for i in range(1, 61)]
    return write_swf(path, lines, header=["MaxProcs: 16"])


def replays(tmp_path: Path) -> list[tuple[str, ReplayResult]]:
    path = trace(tmp_path / "t.swf")
    cfg = tmp_path / "site.cfg"
    cfg.write_text("RESERVATIONDEPTH 1\nUSERCFG[DEFAULT] MAXPROC=8\n")
    return [(p, Replay([ClusterSpec(path)], policy=p).run()) for p in ("easy", "fcfs")] + \
        [("site.cfg", Replay([ClusterSpec(path)], config=cfg).run())]


def cmp_of(results: list[tuple[str, ReplayResult]]):  # type: ignore[no-untyped-def]
    return compare([(label, r.jobs, r.unfinished, r.summary) for label, r in results], 16)


def test_common_set_is_what_every_policy_finished(tmp_path: Path) -> None:
    results = replays(tmp_path)
    cmp = cmp_of(results)
    blocked = {str(i) for i in range(4, 61, 4)}  # the 12-processor jobs
    assert cmp.unfinished == {"easy": 0, "fcfs": 0, "site.cfg": len(blocked)}
    assert cmp.measured == {"easy": 60, "fcfs": 60, "site.cfg": 60 - len(blocked)}
    assert cmp.common_size == 60 - len(blocked) and not cmp.same_jobs
    for label, result in results:
        jobs = cmp.common_jobs[label]
        assert {j.id for j in jobs} == {str(i) for i in range(1, 61)} - blocked
        expected = summarize([j for j in result.jobs if j.id not in blocked], 16)
        common = cmp.common[label]
        assert common is not None and common.jobs_measured == 60 - len(blocked)
        assert common.mean_wait_s == pytest.approx(expected.mean_wait_s)
        assert common.mean_bsld == pytest.approx(expected.mean_bsld)
        assert cmp.own[label] is result.summary  # the own figures stay beside them
    # on all its jobs easy is measured on the big ones too: not the common-set figure
    own, common = cmp.own["easy"], cmp.common["easy"]
    assert own is not None and common is not None and own.mean_wait_s != common.mean_wait_s


def test_same_jobs_give_the_single_run_figures_to_the_digit(tmp_path: Path) -> None:
    results = replays(tmp_path)[:2]
    cmp = cmp_of(results)
    assert cmp.same_jobs and cmp.common_size == 60
    for label, result in results:
        assert cmp.common[label] == result.summary  # every field, not approximately
    assert basis_line(cmp).startswith("Every policy finished the same 60 measured jobs")


def test_basis_line_names_the_set_and_each_unfinished_count(tmp_path: Path) -> None:
    line = basis_line(cmp_of(replays(tmp_path)))
    assert "45 measured jobs EVERY policy finished" in line
    assert "easy 0, fcfs 0, site.cfg 15" in line


def test_jobs_are_matched_by_cluster_and_id(tmp_path: Path) -> None:
    path = trace(tmp_path / "t.swf")
    result = Replay([ClusterSpec(path, name="a"), ClusterSpec(path, name="b")]).run()
    keys = {job_key(j) for j in result.jobs}
    assert len(keys) == 120  # the same ids on two clusters are different jobs
    cmp = compare([("x", result.jobs, 0, result.summary), ("y", result.jobs[:100], 20, None)], 32)
    assert cmp.common_size == 100 and cmp.own["y"] is None
