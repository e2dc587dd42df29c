"""DUROC control side end to end: real gatekeepers, node daemons, job processes."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from grid_tasks.celery_app import create_app
from grid_tasks.effects import watch_signature
from grid_tasks.states import JobState
from tests.duroc.live import component, markers, program
from tests.metrics.flower_live import TaskEvents
from tests.waiting import until

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def out(tmp_path: Path) -> Path:
    d = tmp_path / "markers"
    d.mkdir()
    return d


def _all_gram_terminal(grid: Any, status: Any) -> None:
    for sub in status.subjobs:
        if sub.gram_job is not None:
            assert grid.status(sub.gram_job).state.terminal, sub


def test_happy_path_passes_barrier_and_exchanges(duroc_grid, tmp_path, out):
    grid = duroc_grid.grid
    prog = program(tmp_path)
    rsl = "+" + component("rmA", "left", 2, prog, out, "exchange") + \
        component("rmB", "right", 1, prog, out, "exchange")
    job = grid.job_request(rsl, barrier_timeout=60)
    assert job.contact == f"duroc://coalloc/{job.id}"
    final = job.wait(timeout=60)
    assert final.state is JobState.DONE, final
    assert final.barrier == "released"
    assert [s.label for s in final.subjobs] == ["left", "right"]
    assert all(s.state is JobState.DONE for s in final.subjobs)
    assert markers(out) == ["left-0", "left-1", "left-exchange", "right-0", "right-exchange"]
    assert (out / "left-exchange").read_text() == "left,right"
    gram = grid.status(final.subjob("right").gram_job)
    assert gram.rm == "rmB"


def test_a_single_subjob_holding_two_processors_releases_the_barrier(duroc_grid, tmp_path, out):
    """jobType single with count 2 starts ONE process: the barrier waits for it alone."""
    grid = duroc_grid.grid
    prog = program(tmp_path)
    single = component("rmA", "one", 2, prog, out).replace("(count=2)", "(count=2)(jobType=single)")
    rsl = "+" + single + component("rmB", "other", 1, prog, out)
    final = grid.job_request(rsl, barrier_timeout=30).wait(timeout=40)
    assert final.state is JobState.DONE and final.barrier == "released", final
    assert markers(out) == ["one-0", "other-0"]  # one process of 'one', rank 0


def test_strict_failure_kills_everything_and_no_code_passes(duroc_grid, tmp_path, out):
    grid = duroc_grid.grid
    prog = program(tmp_path)
    rsl = "+" + component("rmA", "waits", 2, prog, out) + \
        component("rmB", "dies", 1, prog, out, executable="/bin/false")
    job = grid.job_request(rsl, barrier_timeout=60)
    final = job.wait(timeout=60)
    assert final.state is JobState.FAILED
    assert "'dies'" in final.reason and "before the barrier" in final.reason
    assert "exit code 1" in final.reason, final.reason
    assert final.barrier == "failed"
    assert markers(out) == []
    _wait_gram_terminal(grid, final)
    assert final.subjob("dies").entered == 0


def test_cancel_while_waiting_at_barrier(duroc_grid, tmp_path, out):
    grid = duroc_grid.grid
    prog = program(tmp_path)
    # the third subjob never exists: count 3 on an RM whose job never starts keeps it open
    rsl = "+" + component("rmA", "a", 1, prog, out) + component("rmB", "b", 1, prog, out)
    job = grid.job_request(rsl, barrier_timeout=60)
    added = job.add("+" + component("rmA", "late", 1, prog, out, executable="/bin/sleep")
                    .replace('(executable="/bin/sleep")', '(executable="/bin/sleep")(arguments=30)'))
    assert added == ["late"]
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        st = job.status()
        if st.subjob("a").entered == 1 and st.subjob("b").entered == 1:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"subjobs never entered: {st}")
    assert st.state is JobState.PENDING and st.barrier == "waiting"
    final = job.cancel()
    assert final.state is JobState.FAILED and final.reason == "cancelled by user"
    assert final.barrier == "cancelled"
    final = job.wait(timeout=30)
    _wait_gram_terminal(grid, final)
    assert markers(out) == []


def _wait_gram_terminal(grid: Any, status: Any, timeout: float = 30) -> None:
    import time

    deadline = time.monotonic() + timeout
    for sub in status.subjobs:
        if sub.gram_job is None:
            continue
        while not grid.status(sub.gram_job).state.terminal:
            assert time.monotonic() < deadline, sub
            time.sleep(0.1)


def test_loose_and_no_barrier_subjobs_do_not_sink_the_job(duroc_grid, tmp_path, out):
    grid = duroc_grid.grid
    prog = program(tmp_path)
    rsl = "+" + component("rmA", "strict", 1, prog, out) + \
        component("rmB", "loose", 1, prog, out, start="loose-barrier", executable="/bin/false") + \
        component("rmA", "free", 1, prog, out, "plain", start="no-barrier",
                  comms="independent")
    final = grid.job_request(rsl, barrier_timeout=60).wait(timeout=60)
    assert final.state is JobState.DONE, final
    assert final.barrier == "released"
    # the loose subjob died before the barrier and left it; the others passed
    assert "strict-0" in markers(out) and "loose-0" not in markers(out)
    assert "free-0" in markers(out)  # a no-barrier subjob's barrier() returns at once


def test_delete_before_release_and_refusal_after(duroc_grid, tmp_path, out):
    from grid_tasks.duroc.errors import CoallocFinishedError
    from grid_tasks.duroc.store_errors import StructureFrozenError

    grid = duroc_grid.grid
    prog = program(tmp_path)
    # 'hog' asks for more than rmB has free while 'blocker' runs: it stays PENDING
    blocker = grid.submit("&(executable=/bin/sleep)(arguments=30)(count=2)", rm="rmB")
    rsl = "+" + component("rmA", "keep", 1, prog, out, "sleep8") + \
        component("rmB", "hog", 2, prog, out)
    job = grid.job_request(rsl, barrier_timeout=60)
    try:
        status = job.delete("hog")
        assert [s.label for s in status.subjobs] == ["keep"]
        _wait_for(lambda: job.status().barrier == "released")
        with pytest.raises(StructureFrozenError):
            job.add("+" + component("rmA", "late", 1, prog, out))
        with pytest.raises(StructureFrozenError):
            job.delete("keep")
        final = job.wait(timeout=40)
        assert final.state is JobState.DONE and markers(out) == ["keep-0"]
        with pytest.raises(CoallocFinishedError, match="DONE"):
            job.add("+" + component("rmA", "late", 1, prog, out))
    finally:
        blocker.cancel()
        blocker.wait(timeout=20)


def test_cli_submit_and_states_json(duroc_grid, tmp_path, out):
    import json
    import subprocess

    from grid_tasks.embedded.stack import grid_tasks_command

    prog = program(tmp_path)
    rsl = "+" + component("rmA", "a", 1, prog, out) + component("rmB", "b", 1, prog, out)
    argv = grid_tasks_command("coalloc", "submit", "--wait", "--timeout", "60", "--json", rsl)
    done = subprocess.run(argv, env=duroc_grid.env, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["state"] == "DONE" and [s["label"] for s in data["subjobs"]] == ["a", "b"]
    states = subprocess.run(grid_tasks_command("coalloc", "states", str(data["id"]), "--json"),
                            env=duroc_grid.env, capture_output=True, text=True, timeout=60)
    assert json.loads(states.stdout)["contact"] == data["contact"]


def _wait_for(predicate: Any, timeout: float = 30) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition never met"
        time.sleep(0.1)


def test_messages_are_matched_by_tag_across_subjobs(duroc_grid, tmp_path, out):
    prog = program(tmp_path)
    rsl = "+" + component("rmA", "send", 1, prog, out, "tags") + \
        component("rmB", "recv", 1, prog, out, "tags")
    final = duroc_grid.grid.job_request(rsl, barrier_timeout=60).wait(timeout=60)
    assert final.state is JobState.DONE, final
    assert (out / "tags").read_bytes() == b"2,1"  # "second" taken first, "first" still queued


def test_many_concurrent_jobs_do_not_cross_talk(duroc_grid, tmp_path, out):
    grid = duroc_grid.grid
    prog = program(tmp_path)
    jobs = [grid.job_request("+" + component("rmA", f"a{i}", 1, prog, out, "exchange")
                             + component("rmB", f"b{i}", 1, prog, out, "exchange"),
                             barrier_timeout=90) for i in range(5)]
    for i, job in enumerate(jobs):
        assert job.wait(timeout=90).state is JobState.DONE
        assert (out / f"a{i}-exchange").read_text() == f"a{i},b{i}"
        assert (out / f"b{i}-exchange").read_text() == f"a{i},b{i}"


def test_cancel_at_submission_and_after_release(duroc_grid, tmp_path, out):
    from grid_tasks.duroc.errors import CoallocFinishedError

    grid = duroc_grid.grid
    prog = program(tmp_path)
    early = grid.job_request("+" + component("rmA", "e", 1, prog, out, "pre5")
                             + component("rmB", "f", 1, prog, out), barrier_timeout=60)
    assert early.cancel().state is JobState.FAILED
    running = grid.job_request("+" + component("rmA", "r", 1, prog, out, "sleep30")
                               + component("rmB", "s", 1, prog, out, "sleep30"),
                               barrier_timeout=60)
    _wait_for(lambda: running.status().barrier == "released")
    _wait_for(lambda: {"r-0", "s-0"} <= set(markers(out)))
    final = running.cancel()
    assert final.state is JobState.FAILED and final.barrier == "released"
    for job in (early, running):
        _wait_gram_terminal(grid, job.wait(timeout=30))
        with pytest.raises(CoallocFinishedError):
            job.cancel()
    assert not any(m.startswith(("e-", "f-")) for m in markers(out))


def test_barrier_timeout_fails_and_cleans_up(duroc_grid, tmp_path, out):
    grid = duroc_grid.grid
    prog = program(tmp_path)
    job = grid.job_request("+" + component("rmA", "quick", 1, prog, out)
                           + component("rmB", "slow", 1, prog, out, "pre30"), barrier_timeout=3)
    final = job.wait(timeout=30)
    assert final.state is JobState.FAILED and "barrier timeout" in final.reason, final
    assert final.barrier == "timed-out"
    _wait_gram_terminal(grid, final)
    assert markers(out) == []


def test_checkjob_shows_a_coallocated_job_and_its_subjobs_link_back(duroc_grid, tmp_path, out):
    import json
    import subprocess

    from grid_tasks.embedded.stack import grid_tasks_command

    prog = program(tmp_path)
    job = duroc_grid.grid.job_request("+" + component("rmA", "x", 1, prog, out)
                                      + component("rmB", "y", 1, prog, out), barrier_timeout=60)
    final = job.wait(timeout=60)
    shown = subprocess.run(grid_tasks_command("checkjob", job.contact, "--json"),
                           env=duroc_grid.env, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["state"] == "DONE" and [s["label"] for s in data["subjobs"]] == ["x", "y"]
    gram = subprocess.run(grid_tasks_command("checkjob", str(final.subjob("y").gram_job),
                                             "--json"),
                          env=duroc_grid.env, capture_output=True, text=True, timeout=60)
    assert json.loads(gram.stdout)["coallocation"] == {"id": job.id, "label": "y"}


def test_strict_subjob_failing_after_release_kills_the_rest_unpolled(duroc_grid, tmp_path, out):
    """Nobody polls: the GRAM job's end itself settles the coallocated job's fate."""
    from grid_tasks.db import session_scope
    from grid_tasks.db.models import CoallocatedJob

    grid = duroc_grid.grid
    prog = program(tmp_path)
    job = grid.job_request("+" + component("rmA", "long", 1, prog, out, "sleep30")
                           + component("rmB", "doomed", 1, prog, out, "sleep30"),
                           barrier_timeout=60)
    _wait_for(lambda: {"long-0", "doomed-0"} <= set(markers(out)))
    grid.cancel(job.status().subjob("doomed").gram_job)  # the strict subjob fails

    def sql_state() -> str:
        with session_scope(grid.sessions) as session:
            return session.get(CoallocatedJob, job.id).state.value
    _wait_for(lambda: sql_state() == "FAILED")
    final = job.status()
    assert "'doomed' failed" in final.reason and final.barrier == "released"
    _wait_gram_terminal(grid, final)
    assert grid.status(final.subjob("long").gram_job).state is JobState.FAILED


# -- fates after release: a subjob exits 3 after passing the barrier ---------------------------

def test_strict_subjob_exiting_nonzero_after_release_fails_job_and_kills_rest(
        duroc_grid, tmp_path, out):
    grid = duroc_grid.grid
    prog = program(tmp_path)
    job = grid.job_request("+" + component("rmA", "long", 1, prog, out, "sleep60")
                           + component("rmB", "bad", 1, prog, out, "fail"), barrier_timeout=60)
    final = job.wait(timeout=60)
    assert final.state is JobState.FAILED and final.barrier == "released", final
    assert "'bad' failed: exit code 3" in final.reason
    assert final.subjob("bad").state is JobState.FAILED and final.subjob("bad").exit_code == 3
    assert {"long-0", "bad-0"} <= set(markers(out))  # both had passed the barrier
    _wait_gram_terminal(grid, final, timeout=40)  # long sleeps 60 s: it was killed
    assert grid.status(final.subjob("long").gram_job).state is JobState.FAILED


def test_loose_and_no_barrier_subjobs_exiting_nonzero_after_release_are_reported(
        duroc_grid, tmp_path, out):
    grid = duroc_grid.grid
    prog = program(tmp_path)
    rsl = "+" + component("rmA", "ok", 1, prog, out, "sleep3") + \
        component("rmB", "loose", 1, prog, out, "fail", start="loose-barrier") + \
        component("rmA", "free", 1, prog, out, "fail", start="no-barrier", comms="independent")
    final = grid.job_request(rsl, barrier_timeout=60).wait(timeout=60)
    assert final.state is JobState.DONE and final.barrier == "released", final
    for label, start in (("loose", "loose-barrier"), ("free", "no-barrier")):
        sub = final.subjob(label)
        assert (sub.state, sub.reason, sub.exit_code) == (JobState.FAILED, "exit code 3", 3)
        assert f"{start} subjob '{label}' failed: exit code 3" in final.reason
    assert final.subjob("ok").state is JobState.DONE
    assert {"ok-0", "loose-0", "free-0"} <= set(markers(out))


def test_job_whose_every_subjob_fails_after_release_is_failed(duroc_grid, tmp_path, out):
    prog = program(tmp_path)
    rsl = "+" + component("rmA", "l1", 1, prog, out, "fail", start="loose-barrier") + \
        component("rmB", "l2", 1, prog, out, "fail", start="loose-barrier")
    final = duroc_grid.grid.job_request(rsl, barrier_timeout=60).wait(timeout=60)
    assert final.state is JobState.FAILED and final.barrier == "released", final
    assert final.reason.startswith("every subjob failed") and "'l2'" in final.reason



def test_a_watcher_of_a_job_gone_succeeds_saying_what_failed(duroc_grid):
    # The user's failure is not the grid's: a watcher whose job was cancelled, aborted
    # by another subjob or refused returns what failed (Flower shows it SUCCESS, not a
    # FAILURE counted against the gatekeeper); the settle it sends decides the job.
    app = create_app(duroc_grid.settings)
    try:
        with TaskEvents(app) as seen:
            watch = watch_signature(app, 999_999, 0, "rmB", time.time() + 60)
            result = watch.apply_async()
            outcome = result.get(timeout=30)
            assert result.state == "SUCCESS"
            until(lambda: "task-succeeded" in seen.of(result.id), 10, "its success event")
    finally:
        app.close()
    assert outcome == {"address": 0, "error": "CoallocFinishedError",
                       "failed": "coallocated job 999999 is gone"}
    assert "task-failed" not in seen.of(result.id)
    assert seen.names()[result.id] == "duroc-watch job coalloc-999999/0 on rmB"
