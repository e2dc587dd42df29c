"""DUROC across both kinds of RM: one subjob on a native RM, one on a private Slurm cluster.

Real parts: a SlurmSite (munged, slurmctld, two slurmd), a redis-server, the scheduler
worker, one gatekeeper per RM and a node daemon for the native RM as subprocesses.  The
Slurm subjob's processes are srun tasks; they find the coordination store through the
runtime library exactly as native ones (rank from srun's ``SLURM_PROCID``), and the
barrier, the strict failure and the cancel (``scancel``) hold across the two kinds.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from grid_tasks.states import JobState
from tests.duroc.live import markers
from tests.duroc.mixed import (SLURM_RM, component, mixed_grid_of, program,
                               start_gatekeeper, stop_gatekeeper)
from tests.slurm_site import NEEDS_SLURM
from tests.waiting import until

pytestmark = NEEDS_SLURM


@pytest.fixture(scope="module")
def mixed_grid(tmp_path_factory: pytest.TempPathFactory):
    yield from mixed_grid_of(tmp_path_factory)


@pytest.fixture
def out(tmp_path: Path) -> Path:
    d = tmp_path / "markers"
    d.mkdir()
    return d


def test_native_and_slurm_subjobs_meet_at_one_barrier(mixed_grid, tmp_path, out):
    grid, prog = mixed_grid.grid, program(tmp_path)
    rsl = "+" + component("rmA", "native", 1, prog, out, "leak") + \
        component(SLURM_RM, "slurm", 2, prog, out, "leak")
    final = grid.job_request(rsl, barrier_timeout=60).wait(timeout=60)
    assert final.state is JobState.DONE, final
    assert final.barrier == "released"
    assert markers(out) == ["native-0", "slurm-0", "slurm-1"]  # srun's two tasks, ranked
    assert {(out / m).read_text() for m in markers(out)} == {"clean"}  # no URL in any argv
    gram = grid.status(final.subjob("slurm").gram_job)
    assert gram.rm == SLURM_RM and gram.state is JobState.DONE


def test_single_subjobs_holding_two_processors_release_the_barrier(mixed_grid, tmp_path, out):
    """jobType single, count 2, on both kinds: one process each, so the barrier opens."""
    grid, prog = mixed_grid.grid, program(tmp_path)
    rsl = "+" + "".join(component(rm, label, 2, prog, out).replace(
        "(count=2)", "(count=2)(jobType=single)") for rm, label in (("rmA", "native"),
                                                                     (SLURM_RM, "slurm")))
    final = grid.job_request(rsl, barrier_timeout=40).wait(timeout=50)
    assert final.state is JobState.DONE and final.barrier == "released", final
    assert markers(out) == ["native-0", "slurm-0"]


def test_a_slurm_subjob_failing_before_the_barrier_fails_the_job(mixed_grid, tmp_path, out):
    grid, prog = mixed_grid.grid, program(tmp_path)
    rsl = "+" + component("rmA", "waits", 1, prog, out) + \
        component(SLURM_RM, "dies", 1, prog, out, executable="/bin/false")
    final = grid.job_request(rsl, barrier_timeout=60).wait(timeout=60)
    assert final.state is JobState.FAILED, final
    assert "'dies'" in final.reason and "before the barrier" in final.reason, final.reason
    assert final.barrier == "failed"
    assert markers(out) == []  # nobody ran past the barrier
    until(lambda: grid.status(final.subjob("waits").gram_job).state.terminal, 30,
          "the native subjob ended")


def test_cancel_stops_the_slurm_subjob_through_its_gatekeeper(mixed_grid, tmp_path, out):
    grid, prog = mixed_grid.grid, program(tmp_path)
    rsl = "+" + component("rmA", "early", 1, prog, out) + \
        component(SLURM_RM, "late", 1, prog, out, "pre60")  # not at the barrier for a minute
    job = grid.job_request(rsl, barrier_timeout=90)
    until(lambda: job.status().subjob("late").gram_job is not None and grid.status(
        job.status().subjob("late").gram_job).state is JobState.ACTIVE, 30,
          "the Slurm subjob running")
    began = time.monotonic()
    job.cancel()
    final = job.wait(timeout=30)
    assert final.state is JobState.FAILED and "cancel" in final.reason, final
    late = final.subjob("late").gram_job
    until(lambda: grid.status(late).state.terminal, 20, "the Slurm subjob ended")
    assert time.monotonic() - began < 20  # scancel'd, not left to its minute of sleep
    assert markers(out) == []
    ended = grid.status(late)
    assert ended.state is JobState.FAILED and "cancelled by user" in ended.reason, ended
    # the scancel ran at the Slurm RM's gatekeeper, not at the scheduler (no Slurm there)
    assert not mixed_grid.slurm_run_by_scheduler.exists(), \
        mixed_grid.slurm_run_by_scheduler.read_text()


def test_loose_and_no_barrier_slurm_subjobs_do_not_sink_the_job(mixed_grid, tmp_path, out):
    grid, prog = mixed_grid.grid, program(tmp_path)
    rsl = "+" + component("rmA", "strict", 1, prog, out) + \
        component(SLURM_RM, "loose", 1, prog, out, executable="/bin/false",
                  start="loose-barrier") + \
        component(SLURM_RM, "free", 1, prog, out, start="no-barrier")
    final = grid.job_request(rsl, barrier_timeout=60).wait(timeout=60)
    assert final.state is JobState.DONE, final
    assert final.barrier == "released"
    # the loose Slurm subjob died before the barrier and left it; the others passed it
    assert markers(out) == ["free-0", "strict-0"]
    loose, free = final.subjob("loose"), final.subjob("free")
    assert loose.state is JobState.FAILED and loose.exit_code == 1, loose  # Slurm's exit code
    assert free.state is JobState.DONE and free.exit_code == 0, free


def test_slurm_subjobs_added_and_deleted_before_release(mixed_grid, tmp_path, out):
    from grid_tasks.duroc.errors import CoallocFinishedError

    grid, prog = mixed_grid.grid, program(tmp_path)
    # 'gone' would hold the barrier for a minute; deleting it lets the rest through
    rsl = "+" + component("rmA", "keep", 1, prog, out, "pre3") + \
        component(SLURM_RM, "gone", 1, prog, out, "pre60")
    job = grid.job_request(rsl, barrier_timeout=60)
    assert job.add("+" + component(SLURM_RM, "added", 1, prog, out)) == ["added"]
    until(lambda: job.status().subjob("gone").gram_job is not None, 30, "'gone' submitted")
    gone = job.status().subjob("gone").gram_job
    status = job.delete("gone")
    assert sorted(s.label for s in status.subjobs) == ["added", "keep"]
    final = job.wait(timeout=40)
    assert final.state is JobState.DONE and final.barrier == "released", final
    assert markers(out) == ["added-0", "keep-0"]
    assert grid.status(final.subjob("added").gram_job).rm == SLURM_RM
    until(lambda: grid.status(gone).state.terminal, 20, "the deleted Slurm subjob ended")
    assert "cancelled" in (grid.status(gone).reason or ""), grid.status(gone)
    with pytest.raises(CoallocFinishedError, match="DONE"):
        job.delete("added")
    assert not mixed_grid.slurm_run_by_scheduler.exists()


def _slurm_state(live, gram_id: int) -> str:
    """Slurm's state of a GRAM job's Slurm job (squeue, as its cluster's admin)."""
    from grid_tasks import db

    with db.session_scope(live.grid.sessions) as session:
        slurm_id = db.repository.get_job(session, gram_id).request["slurm"]["id"]
    shown = live.slurm_cluster.run("squeue", "-h", "--states=all", "-j", str(slurm_id),
                                   "-o", "%T")
    return shown.stdout.strip()


def test_a_cancel_while_the_slurm_gatekeeper_is_down_is_applied_when_it_is_back(
        mixed_grid, tmp_path, out):
    """The cancel is recorded and answered at once, saying the gatekeeper is unreachable;
    the Slurm job runs on meanwhile (nobody else may scancel it), and the gatekeeper,
    started again, scancels it and records the user's cancel."""
    grid, prog = mixed_grid.grid, program(tmp_path)
    rsl = "+" + component("rmA", "early", 1, prog, out) + \
        component(SLURM_RM, "late", 1, prog, out, "pre60")  # not at the barrier for a minute
    job = grid.job_request(rsl, barrier_timeout=90)
    until(lambda: job.status().subjob("late").gram_job is not None and grid.status(
        job.status().subjob("late").gram_job).state is JobState.ACTIVE, 30,
          "the Slurm subjob running")
    late = job.status().subjob("late").gram_job
    stop_gatekeeper(mixed_grid)
    try:
        began = time.monotonic()
        answered = job.cancel()
        took = time.monotonic() - began
        (note,) = answered.notes
        assert f"GRAM job {late} on {SLURM_RM}" in note, note
        assert "gatekeeper is unreachable, it will be retried" in note, note
        assert took < 5, took  # answered, not left waiting on the gatekeeper
        final = job.wait(timeout=30)
        assert final.state is JobState.FAILED and "cancel" in final.reason, final
        time.sleep(1.5)  # nobody else stops it: the Slurm job runs on, its row open
        assert _slurm_state(mixed_grid, late) == "RUNNING"
        assert grid.status(late).state is JobState.ACTIVE
    finally:
        start_gatekeeper(mixed_grid)
    until(lambda: grid.status(late).state.terminal, 40, "the Slurm subjob ended")
    ended = grid.status(late)
    assert ended.state is JobState.FAILED and ended.reason == "cancelled by user", ended
    assert ended.gram_error == "USER_CANCELLED"
    assert _slurm_state(mixed_grid, late) == "CANCELLED"
    assert markers(out) == []
    assert not mixed_grid.slurm_run_by_scheduler.exists(), \
        mixed_grid.slurm_run_by_scheduler.read_text()
