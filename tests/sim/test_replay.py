"""Replay set-up: machine size, names, alignment, reservation capture, progress counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from grid_tasks.sim.replay import ClusterSpec, Replay, ReplayError, parse_cluster_arg
from tests.sim.conftest import swf_line, write_swf


def busy_trace(path: Path, unix_start: int | None = None, procs: int = 8) -> Path:
    """Whole-machine and half-machine jobs arriving faster than they run."""
    lines = [swf_line(i, 10 * i, 300, procs if i % 3 == 0 else procs // 2, req_time=600)
             for i in range(1, 41)]
    header = [f"MaxProcs: {procs}"] + ([f"UnixStartTime: {unix_start}"] if unix_start else [])
    return write_swf(path, lines, header=header)


def test_cluster_argument_forms() -> None:
    assert parse_cluster_arg("a.swf:64") == ClusterSpec("a.swf", 64)
    assert parse_cluster_arg("dir:x/a.swf") == ClusterSpec("dir:x/a.swf")
    assert parse_cluster_arg("a.swf") == ClusterSpec("a.swf")
    with pytest.raises(ReplayError, match="at least 1"):
        parse_cluster_arg("a.swf:0")


def test_names_are_unique_and_sizes_from_headers(tmp_path: Path) -> None:
    trace = busy_trace(tmp_path / "site.swf.gz")
    replay = Replay([ClusterSpec(trace), ClusterSpec(trace, 16)])
    assert [(r.name, r.procs) for r in replay.runs] == [("site", 8), ("site#2", 16)]
    assert replay.expected_jobs() is None  # the header gives no MaxJobs
    result = replay.run()
    assert replay.submitted() == 80 and len(result.jobs) == 80
    summaries = [c.summary for c in result.clusters]
    assert all(s is not None for s in summaries)
    # the bigger machine waits less for the same jobs
    assert summaries[1].mean_wait_s < summaries[0].mean_wait_s  # type: ignore[union-attr]
    assert result.summary is not None and result.summary.procs == 24


def test_unix_alignment_shifts_the_later_trace(tmp_path: Path) -> None:
    early = busy_trace(tmp_path / "early.swf", unix_start=1_000_000)
    late = busy_trace(tmp_path / "late.swf", unix_start=1_000_500)
    result = Replay([ClusterSpec(early), ClusterSpec(late)], align="unix").run()
    first = {c: min(j.submit for j in result.jobs if j.cluster == c) for c in ("early", "late")}
    assert first == {"early": 10, "late": 510}
    result = Replay([ClusterSpec(early), ClusterSpec(late)]).run()  # default: both from 0
    assert {min(j.submit for j in result.jobs if j.cluster == c) for c in ("early", "late")} == {10}
    no_start = busy_trace(tmp_path / "plain.swf")
    with pytest.raises(ReplayError, match="no UnixStartTime"):
        Replay([ClusterSpec(early), ClusterSpec(no_start)], align="unix")


def test_reservations_held_in_the_window_are_captured(tmp_path: Path) -> None:
    trace = busy_trace(tmp_path / "t.swf")
    result = Replay([ClusterSpec(trace)], policy="conservative", window=(0, 5000)).run()
    assert result.reservations, "a congested conservative replay reserves for waiting jobs"
    jobs = {j.id: j for j in result.jobs}
    for span in result.reservations:
        assert span.kind == "job" and span.end > 0 and span.start < 5000
        job = jobs[span.job_id]  # type: ignore[index]
        assert span.procs == job.procs and span.end - span.start == job.estimate
        # conservative reservations are only ever moved earlier: the job never starts later
        assert job.submit <= job.start <= span.start
    narrow = Replay([ClusterSpec(trace)], policy="conservative", window=(0, 400)).run()
    assert narrow.reservations == []  # every reservation lies after t=400


def test_bad_set_up_is_refused(tmp_path: Path) -> None:
    no_size = write_swf(tmp_path / "n.swf", [swf_line(1, 0, 5, 1)])
    with pytest.raises(ReplayError, match="no MaxProcs"):
        Replay([ClusterSpec(no_size)])
    with pytest.raises(ReplayError, match="at least one trace"):
        Replay([])
    with pytest.raises(ReplayError, match="--first must be at least 1"):
        Replay([ClusterSpec(no_size, 4)], first=0)
    with pytest.raises(ReplayError, match="unknown alignment"):
        Replay([ClusterSpec(no_size, 4)], align="wall")
