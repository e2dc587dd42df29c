"""Slurm's printed answers read into typed values."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from grid_tasks.slurm import SlurmRefused, SlurmUnavailable
from grid_tasks.slurm import parse
from grid_tasks.states import JobState


def test_test_only_estimate():
    est = parse.estimate("sbatch: Job 12 to start at 2026-11-26T05:49:54 using 2 processors "
                         "on nodes b3 in partition all\n")
    assert (est.job_id, est.procs, est.nodes, est.partition) == (12, 2, "b3", "all")
    assert est.start == datetime.fromisoformat("2026-11-26T05:49:54").astimezone()


@pytest.mark.parametrize("stderr,kind,code", [
    ("sbatch: error: Batch job submission failed: Invalid partition name specified",
     SlurmRefused, "INVALID_QUEUE"),
    ("sbatch: error: Batch job submission failed: Requested node configuration is not available",
     SlurmRefused, "NO_RESOURCES"),
    ("sbatch: error: Batch job submission failed: Unable to contact slurm controller "
     "(connect failure)", SlurmUnavailable, "CONNECTION_FAILED"),
    ("something new", SlurmRefused, "INVALID_REQUEST"),
])
def test_refusals_are_typed(stderr, kind, code):
    with pytest.raises(kind) as err:
        parse.estimate(stderr)
    assert err.value.code == code and "estimate" in str(err.value)


def test_squeue_json_states_exit_codes_and_signals():
    raw = {"jobs": [
        {"job_id": 1, "job_state": "FAILED", "state_reason": "NonZeroExitCode", "exit_code": 768,
         "start_time": 100, "end_time": 101, "nodes": "a1"},
        {"job_id": 2, "job_state": "RUNNING", "exit_code": 0, "start_time": 100, "end_time": 160},
        {"job_id": 3, "job_state": "PENDING", "state_reason": "Resources", "start_time": 0},
        {"job_id": 4, "job_state": "CANCELLED", "exit_code": 9, "start_time": 5, "end_time": 6},
        {"job_id": 5, "job_state": "TIMEOUT", "exit_code": 0, "start_time": 5, "end_time": 65},
    ]}
    jobs = parse.squeue_jobs(json.dumps(raw))
    assert (jobs[1].state, jobs[1].exit_code, jobs[1].signal, jobs[1].end_time) == (JobState.FAILED, 3, None, 101.0)
    assert (jobs[2].state, jobs[2].exit_code, jobs[2].end_time) == (JobState.ACTIVE, None, None)
    assert (jobs[3].state, jobs[3].reason, jobs[3].start_time) == (JobState.PENDING, "Resources", None)
    assert (jobs[4].state, jobs[4].signal) == (JobState.FAILED, 9)
    assert jobs[5].state is JobState.FAILED and jobs[5].finished


def test_unknown_slurm_state_counts_as_pending():
    job = parse.squeue_jobs(json.dumps({"jobs": [{"job_id": 9, "job_state": "NEW_STATE"}]}))[9]
    assert job.state is JobState.PENDING and not job.finished


def test_sinfo_cpus():
    assert parse.cpus("2/6/0/8\n") == (6, 8)
    with pytest.raises(SlurmRefused):
        parse.cpus("garbage")
