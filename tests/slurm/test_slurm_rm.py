"""GRAM jobs on a Slurm RM, end to end: the gatekeeper maps alice to her account, stores
the job and submits it to Slurm as that account; its follower records PENDING ->
ACTIVE -> DONE/FAILED with the exit code and Slurm's reason, copies the job's streams
into its output stream; a cancel is an scancel; slurmctld down is a typed refusal and
a running job is followed again once it is back.  (See tests/slurm/conftest.py.)"""

from __future__ import annotations

import socket
import time

import pytest
from sqlalchemy import select

from grid_tasks import db
from grid_tasks.gram.errors import GramJobError
from grid_tasks.db.models import Job as JobRow
from grid_tasks.gram.jmvars import JobManagerRequest
from grid_tasks.gram.records import Outbox
from grid_tasks.gram.submission import insert_job
from grid_tasks.services import Services
from grid_tasks.slurm import SlurmClient
from grid_tasks.slurm.errors import SlurmUnavailable
from grid_tasks.scheduling.slurm_jobs import HandOver, slurm_side, submit_to_slurm
from grid_tasks.states import JobState, MauiJobState
from tests.slurm.conftest import ALICE, GONE, RM



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


def test_cancel_scancels_the_running_job_as_its_account(slurm_grid):
    handle = slurm_grid.client.submit(
        "&(executable=/bin/sleep)(arguments=300)(jobType=single)(maxWallTime=300)", rm=RM)
    running = _wait_state(slurm_grid, handle.id, {JobState.ACTIVE})
    assert running.maui_state is MauiJobState.RUNNING
    (nodes,) = running.nodes_allocated  # Slurm's host list, as checkjob shows it
    assert nodes in slurm_grid.cluster.node_names
    handle.cancel()
    status = handle.wait(timeout=30)
    assert (status.state, status.gram_error) == (JobState.FAILED, "USER_CANCELLED")
    assert status.reason == "cancelled by user"
    slurm_id = _row(slurm_grid, handle.id).request["slurm"]["id"]
    assert _slurm(slurm_grid).jobs([slurm_id])[slurm_id].slurm_state == "CANCELLED"


def test_what_slurm_cannot_be_told_is_refused_with_the_gram_error(slurm_grid):
    with pytest.raises(GramJobError) as err:
        slurm_grid.client.submit("&(executable=/bin/true)(maxCpuTime=5)", rm=RM)
    assert err.value.code == "INVALID_MAX_CPU_TIME"
    with pytest.raises(GramJobError) as err:
        slurm_grid.client.submit("&(executable=/bin/true)(count=9)", rm=RM)
    assert err.value.code == "NO_RESOURCES" and "has 4" in str(err.value)
    with db.session_scope(slurm_grid.client.sessions) as session:
        assert db.repository.jobs_in_states(session, RM, [JobState.PENDING]) == []


def test_controller_down_refuses_submission_and_stores_nothing(slurm_grid):
    """The gatekeeper's submission, run here against an RM whose slurmctld is down."""
    services = Services(slurm_grid.settings)
    request = JobManagerRequest.for_account(slurm_grid.settings, "&(executable=/bin/true)",
                                            None, slurm_grid.account.pw_name, "<rsl>")
    side = slurm_side(slurm_grid.settings, GONE)
    try:
        with pytest.raises(SlurmUnavailable) as err:
            submit_to_slurm(services, side, request.rsl, request, {"user": None},
                            identity=ALICE)
        assert err.value.code == "CONNECTION_FAILED" and "unreachable" in str(err.value)
        with db.session_scope(services.sessions) as session:
            assert db.repository.jobs_in_states(session, GONE, list(JobState)) == []
    finally:
        services.close()


@pytest.mark.slow  # ~30 s: Slurm's clients retry a stopped controller for 9 s, slurmd
def test_a_job_is_followed_again_when_slurmctld_returns(slurm_grid):  # reports late
    handle = slurm_grid.client.submit(
        '&(executable=/bin/sh)(arguments=-c "sleep 3; echo survived")(jobType=single)'
        '(maxWallTime=60)', rm=RM)
    _wait_state(slurm_grid, handle.id, {JobState.ACTIVE})
    slurm_grid.cluster.stop_controller()
    try:
        with pytest.raises(SlurmUnavailable) as err:
            slurm_grid.client.submit("&(executable=/bin/true)", rm=RM)
        assert err.value.code == "CONNECTION_FAILED"
        time.sleep(3)  # the job ends meanwhile, unseen
        assert _row(slurm_grid, handle.id).state is JobState.ACTIVE
    finally:
        slurm_grid.cluster.start_controller()
    status = handle.wait(timeout=30)
    assert (status.state, status.exit_code) == (JobState.DONE, 0)
    assert handle.output() == "survived\n"


@pytest.mark.slow  # ~75 s: Slurm's time limits are whole minutes
def test_a_job_slurm_kills_at_its_time_limit_fails_with_the_reason(slurm_grid):
    handle = slurm_grid.client.submit(
        "&(executable=/bin/sleep)(arguments=300)(jobType=single)(maxWallTime=1)", rm=RM)
    status = handle.wait(timeout=120)
    assert (status.state, status.gram_error) == (JobState.FAILED, "JOB_EXECUTION_FAILED")
    assert "TIMEOUT" in status.reason


def test_count_directory_environment_and_named_streams_reach_slurm(slurm_grid, open_dir):
    rsl = ('&(executable=/bin/sh)(arguments=-c "echo $GREETING $GLOBUS_GATEKEEPER_HOST; pwd")'
           f'(count=2)(directory={open_dir})(environment=(GREETING hi))'
           f'(stdout={open_dir}/out)')
    handle = slurm_grid.client.submit(rsl, rm=RM)
    assert handle.wait(timeout=30).state is JobState.DONE
    lines = sorted((open_dir / "out").read_text().splitlines())
    host = socket.gethostname()
    assert lines == [str(open_dir)] * 2 + [f"hi {host}"] * 2
    assert (open_dir / "out").stat().st_uid == slurm_grid.account.pw_uid
    assert handle.output() == ""  # the RSL named its own stdout


def test_a_job_waiting_in_slurm_is_idle_for_maui_and_cancels_at_once(slurm_grid):
    blocker = slurm_grid.client.submit(
        "&(executable=/bin/sleep)(arguments=300)(jobType=single)(count=2)(maxWallTime=300)",
        rm=RM)  # one node's 2 processors of the 4
    try:
        _wait_state(slurm_grid, blocker.id, {JobState.ACTIVE})
        waiting = slurm_grid.client.submit("&(executable=/bin/true)(count=3)(maxWallTime=60)",
                                           rm=RM)
        slurm_id = _row(slurm_grid, waiting.id).request["slurm"]["id"]
        while _slurm(slurm_grid).jobs([slurm_id])[slurm_id].reason in ("None", ""):
            time.sleep(0.05)  # until Slurm's scheduler has looked at it, and kept it waiting
        row = _row(slurm_grid, waiting.id)
        assert (row.state, row.maui_state) == (JobState.PENDING, MauiJobState.IDLE)
        status = waiting.cancel()  # recorded at once, as a native idle job's
        assert (status.state, status.gram_error) == (JobState.FAILED, "USER_CANCELLED")
        assert _slurm(slurm_grid).jobs([slurm_id])[slurm_id].slurm_state == "CANCELLED"
    finally:
        blocker.cancel()
    assert blocker.wait(timeout=30).state is JobState.FAILED


def test_a_slurm_job_whose_row_was_not_stored_is_cancelled_again(slurm_grid):
    """What a submission does when its transaction fails after sbatch (e.g. the commit)."""
    services = Services(slurm_grid.settings)
    try:
        side = slurm_side(slurm_grid.settings, RM)
        request = JobManagerRequest.for_account(
            slurm_grid.settings, "&(executable=/bin/sleep)(arguments=300)(jobType=single)",
            None, None, "<rsl>")
        hand_over = HandOver(services, side, request, request.lower(), None)
        with pytest.raises(RuntimeError), db.session_scope(services.sessions) as session:
            job_id, _ = insert_job(session, RM, request.rsl, hand_over.sub, {"user": "root"},
                                   services.clock.now(), Outbox())
            hand_over(session, job_id)
            raise RuntimeError("the commit failed")  # rolled back: no row
        hand_over.withdraw()
        (native, _account), = hand_over.submitted
        ended = _slurm(slurm_grid).jobs([int(native)])[int(native)]
        assert ended.slurm_state == "CANCELLED"
        with db.session_scope(services.sessions) as session:
            assert session.get(JobRow, job_id) is None
    finally:
        services.close()


def test_a_job_naming_its_grid_reservation_runs_in_it_and_its_start_is_noted(slurm_grid):
    """The broker's reservation on the Slurm RM (the RM interface's reserve, for alice's
    account, starting now), then her job naming it: sbatch --reservation, and the
    follower records the real start against the estimate on the reservation's row."""
    services = Services(slurm_grid.settings)
    side = slurm_side(slurm_grid.settings, RM)
    now = time.time()
    try:
        with db.session_scope(services.sessions) as session:
            side.backend.reserve(session, name="mine", allocation={"all": 1}, start=now,
                                 duration=120.0, token="tok", job_key="job-mine", now=now,
                                 account=slurm_grid.account.pw_name)
        handle = slurm_grid.client.submit(
            "&(executable=/bin/true)(jobType=single)(maxWallTime=60)(reservation=mine)", rm=RM)
        assert handle.wait(timeout=30).state is JobState.DONE
        slurm_id = _row(slurm_grid, handle.id).request["slurm"]["id"]
        shown = slurm_grid.cluster.run("scontrol", "show", "job", str(slurm_id)).stdout
        assert "Reservation=gt-slurm1-mine" in shown
        with db.session_scope(services.sessions) as session:
            held = session.scalars(select(db.Reservation).where(
                db.Reservation.rm == RM, db.Reservation.name == "mine")).one()
            assert held.owner_job_id == handle.id
            assert abs(held.resources["slurm"]["estimate_error_s"]) < 60
            assert side.backend.release(session, name="mine", now=time.time())
    finally:
        services.close()


def test_a_repeated_submission_is_one_job_in_slurm(slurm_grid):
    first = slurm_grid.client.submit("&(executable=/bin/true)(jobType=single)", rm=RM,
                                     idempotency_key="once-in-slurm")
    again = slurm_grid.client.submit("&(executable=/bin/true)(jobType=single)", rm=RM,
                                     idempotency_key="once-in-slurm")
    assert again.id == first.id
    assert first.wait(timeout=30).state is JobState.DONE
    slurm_id = _row(slurm_grid, first.id).request["slurm"]["id"]
    names = slurm_grid.cluster.run("squeue", "-h", "--states=all", "-o", "%j").stdout.split()
    assert names.count(f"gt{first.id}.{RM}") == 1 and slurm_id


def test_a_job_killed_by_a_node_failure_fails_with_the_reason(slurm_grid):
    """The node running the job is set DOWN (as slurmctld does when a node dies): Slurm
    kills the job, NODE_FAIL (never requeued: a GRAM job runs once), and the user sees
    FAILED with that reason in the job's status and in ``grid-tasks checkjob``."""
    from click.testing import CliRunner

    from grid_tasks.cli import main

    handle = slurm_grid.client.submit(
        "&(executable=/bin/sleep)(arguments=300)(jobType=single)(maxWallTime=300)", rm=RM)
    running = _wait_state(slurm_grid, handle.id, {JobState.ACTIVE})
    (node,) = running.nodes_allocated
    assert node in slurm_grid.cluster.node_names
    down = slurm_grid.cluster.run("scontrol", "update", f"nodename={node}", "state=down",
                                  "reason=grid_tasks test: node failure")
    assert down.returncode == 0, down.stderr
    try:
        status = handle.wait(timeout=30)
    finally:
        slurm_grid.cluster.run("scontrol", "update", f"nodename={node}", "state=resume")
    assert (status.state, status.gram_error) == (JobState.FAILED, "JOB_EXECUTION_FAILED")
    assert "node of the job failed (NODE_FAIL)" in status.reason, status.reason
    slurm_id = running.request["slurm"]["id"]
    assert _slurm(slurm_grid).jobs([slurm_id])[slurm_id].slurm_state == "NODE_FAIL"
    shown = CliRunner().invoke(main, ["checkjob", "--json", str(handle.id)],
                               env=slurm_grid.env())
    assert shown.exit_code == 0, shown.output
    assert "NODE_FAIL" in shown.output and "JOB_EXECUTION_FAILED" in shown.output
    deadline = time.monotonic() + 20  # the node back for the next tests
    while slurm_grid.cluster.run("sinfo", "-h", "-n", node, "-o", "%T").stdout.strip() != "idle":
        assert time.monotonic() < deadline, "the node did not come back"
        time.sleep(0.2)
