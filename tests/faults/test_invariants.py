"""The invariant checks themselves catch what they are meant to catch (real processes)."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from grid_tasks.faults import MARKER_ENV, FaultGrid
from grid_tasks.faults.invariants import OvercommitSampler, marked_processes, no_lost_jobs, \
    no_orphans


@pytest.fixture
def marked(request: pytest.FixtureRequest):
    procs = []

    def spawn(marker: str, node: str) -> subprocess.Popen:
        env = {**os.environ, MARKER_ENV: marker, "GRID_TASKS_NODE": node}
        proc = subprocess.Popen(["sleep", "30"], env=env)
        procs.append(proc)
        return proc

    yield spawn
    for proc in procs:
        proc.kill()
        proc.wait()


def test_orphan_scan_finds_marked_processes_only(marked) -> None:
    proc = marked("orphan-test-a", "node3")
    assert not no_orphans("orphan-test-a").ok
    assert (proc.pid, "node3") in marked_processes("orphan-test-a")
    assert no_orphans("orphan-test-b").ok
    proc.kill()
    proc.wait()
    assert no_orphans("orphan-test-a").ok


def test_overcommit_sampler_flags_more_processes_than_procs(marked) -> None:
    with OvercommitSampler("oc-test", {"node3": 2}, period=0.05) as sampler:
        for _ in range(3):
            marked("oc-test", "node3")
        deadline = time.monotonic() + 5
        while not sampler.violations and time.monotonic() < deadline:
            time.sleep(0.05)
    check = sampler.check()
    assert not check.ok and "node3: 3 > 2" in check.detail


def test_lost_job_check_flags_a_missing_record(fault_grid: FaultGrid) -> None:
    check = no_lost_jobs(fault_grid.grid, [987654])
    assert not check.ok and "987654: no SQL record" in check.detail
