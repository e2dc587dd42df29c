"""Record-to-job conversions: the project default and the reference (pyss) one."""

from __future__ import annotations

import pytest

from grid_tasks.sim.conventions import (
    ConventionError, DefaultConvention, PyssConvention, get_convention,
)
from grid_tasks.sim.swf import SWFRecord


def rec(job: int = 1, submit: int = 100, run: float = 50, alloc: int = 4, req_procs: int = -1,
        req_time: float = 60, user: int = 7, group: int = 3, queue: int = 2) -> SWFRecord:
    return SWFRecord(job, submit, -1, run, alloc, -1, -1, req_procs, req_time, -1, 1, user,
                     group, -1, queue, -1, -1, -1)


class TestPyss:
    conv = PyssConvention(128)

    def test_normal_record(self) -> None:
        job = PyssConvention(128).convert(rec(run=50, req_time=60, alloc=4, req_procs=8))
        assert job is not None
        # allocated processors, never requested; estimate = max(req, run, 1)
        assert (job.id, job.submit, job.estimate, job.runtime, job.procs) == ("1", 100, 60, 50, 4)
        assert job.measured and (job.user, job.group, job.queue) == (7, 3, 2)

    def test_overrun_gets_requested_runtime_and_run_as_estimate(self) -> None:
        job = self.conv.convert(rec(run=500, req_time=60))
        assert job is not None and job.estimate == 500 and job.runtime == 60

    def test_missing_request_gives_one_second_run(self) -> None:
        job = self.conv.convert(rec(run=500, req_time=-1))
        assert job is not None and job.estimate == 500 and job.runtime == 1 and job.measured

    def test_processors_capped_at_machine_size(self) -> None:
        job = PyssConvention(16).convert(rec(alloc=64))
        assert job is not None and job.procs == 16

    @pytest.mark.parametrize("bad", [dict(run=0), dict(run=-1), dict(alloc=-1), dict(alloc=0),
                                     dict(submit=-5)])
    def test_broken_records_become_unmeasured_one_second_jobs(self, bad: dict) -> None:
        conv = PyssConvention(128)
        job = conv.convert(rec(**bad))
        assert job is not None and not job.measured
        assert job.estimate == 1 and job.runtime == 1
        assert job.submit == max(bad.get("submit", 100), 1)
        assert job.procs == max(1, bad.get("alloc", 4))
        assert conv.unmeasured == 1 and conv.dropped == 0

    def test_fractional_times_truncate(self) -> None:
        job = self.conv.convert(rec(run=50.9, req_time=70.2))
        assert job is not None and job.estimate == 70 and job.runtime == 50


class TestDefault:
    def test_requested_processors_and_time(self) -> None:
        job = DefaultConvention(128).convert(rec(alloc=4, req_procs=8, run=500, req_time=60))
        assert job is not None
        # the user's request is what the scheduler sees; the overrun is kept (it gets killed)
        assert (job.procs, job.estimate, job.runtime) == (8, 60, 500)

    def test_allocated_when_request_missing_and_exact_estimate_when_no_walltime(self) -> None:
        job = DefaultConvention(128).convert(rec(alloc=5, req_procs=-1, run=42, req_time=-1))
        assert job is not None and (job.procs, job.estimate, job.runtime) == (5, 42, 42)

    @pytest.mark.parametrize("bad", [dict(run=0), dict(submit=-1), dict(alloc=-1),
                                     dict(req_procs=200)])
    def test_unusable_records_are_dropped_and_counted(self, bad: dict) -> None:
        conv = DefaultConvention(128)
        assert conv.convert(rec(**bad)) is None
        assert conv.dropped == 1


def test_lookup_by_name_and_errors() -> None:
    assert isinstance(get_convention("pyss", 8), PyssConvention)
    assert get_convention("default", 8).name == "default"
    with pytest.raises(ConventionError, match="unknown conventions 'maui'"):
        get_convention("maui", 8)
    with pytest.raises(ConventionError, match="at least one processor"):
        get_convention("pyss", 0)
