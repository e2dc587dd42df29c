"""GRAM jobs on a Slurm RM, end to end: the gatekeeper maps alice to her account, stores
the job and submits it to Slurm as that account; its follower records PENDING ->
ACTIVE -> DONE/FAILED with the exit code and Slurm's reason, copies the job's streams
into its output stream; a cancel is an scancel; slurmctld down is a typed refusal and
a running job is followed again once it is back.  (See tests/slurm/conftest.py.)"""

from __future__ import annotations

import time

import pytest

from grid_tasks import db
from grid_tasks.gram.errors import GramJobError
from grid_tasks.slurm import SlurmClient
from grid_tasks.slurm.errors import SlurmUnavailable
from grid_tasks.states import JobState, MauiJobState
from tests.slurm.conftest import RM


def _row(grid, job_id: int):
    with db.session_scope(grid.client.sessions) as session:
        row = db.repository.get_job(session, job_id)
        session.expunge(row)
        return row


def _wait_state(grid, job_id: int, states: set[JobState], timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        row = _row(grid, job_id)
        if row.state in states:
            return row
        assert time.monotonic() < deadline, f"job {job_id} still {row.state}"
        time.sleep(0.05)


def _slurm(grid) -> SlurmClient:
    return SlurmClient(str(grid.cluster.conf), "all")


def test_a_job_runs_in_slurm_as_the_mapped_account_and_its_output_streams(slurm_grid):
    rsl = ('&(executable=/bin/sh)(jobType=single)(maxWallTime=60)'
           '(arguments=-c "id -un; echo $GLOBUS_GRAM_JOB_CONTACT; echo oops >&2; exit 3")')
    handle = slurm_grid.client.submit(rsl, rm=RM)
    status = handle.wait(timeout=30)
    assert status.state is JobState.DONE and status.exit_code == 3
    assert handle.output().split() == [slurm_grid.account.pw_name, handle.contact]
    assert handle.output("stderr") == "oops\n"
    row = _row(slurm_grid, handle.id)
    assert row.maui_state is MauiJobState.COMPLETED and row.user == slurm_grid.account.pw_name
    assert [h.to_state for h in handle.history()] == [
        JobState.PENDING, JobState.ACTIVE, JobState.DONE]
    slurm_id = row.request["slurm"]["id"]
    assert _slurm(slurm_grid).jobs([slurm_id])[slurm_id].slurm_state == "FAILED"
