"""How the Slurm follower reads Slurm's ends and the jobs' stream files (pure parts)."""

from __future__ import annotations

import os

from grid_tasks.scheduling.slurm_follow import ending, read_lines
from grid_tasks.slurm.parse import SlurmJob
from grid_tasks.states import JobState


def job(state: str, code: int | None = 0, signal: int | None = None) -> SlurmJob:
    return SlurmJob(7, state, "None", code, signal, 1.0, 2.0, "g1")


def test_a_script_that_ran_and_exited_is_done_with_its_exit_code_as_in_gram():
    assert ending(job("COMPLETED"), False).state is JobState.DONE
    done = ending(job("FAILED", 3), False)
    assert (done.state, done.reason, done.gram_error) == (JobState.DONE, "exit code 3", None)


def test_slurm_kills_are_failures_with_the_reason():
    timeout = ending(job("TIMEOUT", 0, 15), False)
    assert (timeout.state, timeout.gram_error) == (JobState.FAILED, "JOB_EXECUTION_FAILED")
    assert "TIMEOUT" in timeout.reason and "maxWallTime" in timeout.reason
    assert "NODE_FAIL" in ending(job("NODE_FAIL"), False).reason
    assert ending(job("FAILED", 0, 9), False).reason == "killed by signal 9"
    assert "SPECIAL_EXIT" in ending(job("SPECIAL_EXIT"), False).reason


def test_a_cancel_is_the_users_when_the_grid_cancelled_it():
    mine = ending(job("CANCELLED", 0, 15), True)
    assert (mine.reason, mine.gram_error) == ("cancelled by user", "USER_CANCELLED")
    other = ending(job("CANCELLED", 0, 15), False)
    assert other.gram_error == "USER_CANCELLED" and "scancel" in other.reason


def test_only_complete_lines_are_read_until_the_job_ended(tmp_path):
    path = tmp_path / "stdout"
    path.write_bytes(b"one\ntw")
    assert read_lines(path, 0, final=False) == ([b"one\n"], 4)
    assert read_lines(path, 4, final=False) == ([], 4)
    assert read_lines(path, 4, final=True) == ([b"tw"], 6)
    assert read_lines(tmp_path / "none", 0, final=True) == ([], 0)


def test_a_link_or_a_file_of_another_account_is_not_copied(tmp_path):
    secret = tmp_path / "secret"
    secret.write_bytes(b"root's\n")
    (tmp_path / "stdout").symlink_to(secret)
    assert read_lines(tmp_path / "stdout", 0, final=True) == ([], 0)
    assert read_lines(secret, 0, final=True, owner=os.geteuid() + 1) == ([], 0)
    assert read_lines(secret, 0, final=True) == ([b"root's\n"], 7)
