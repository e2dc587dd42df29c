"""End to end: submit -> live Maui -> launch on nodes -> job manager -> states -> client."""

from __future__ import annotations

import pytest

from grid_tasks.states import JobState, MauiJobState



def test_submit_runs_and_collects_output(module_grid):
    grid = module_grid.grid
    job = grid.submit('&(executable=/bin/sh)(arguments="-c" "echo rank=$GRID_TASKS_RANK '
                      'of $GRID_TASKS_SIZE on $GRID_TASKS_NODE")(count=3)', rm="rmA")
    assert job.contact == f"gram://rmA/jobs/{job.id}"
    status = job.wait(timeout=30)
    assert status.state is JobState.DONE, status
    assert status.maui_state is MauiJobState.COMPLETED
    assert status.exit_code == 0 and set(status.exit_codes) == {"0", "1", "2"}
    lines = sorted(job.output().splitlines())
    assert [line.split(" on ")[0] for line in lines] == [
        "rank=0 of 3", "rank=1 of 3", "rank=2 of 3"]
    assert sum(status.nodes.values()) == 3
    states = [h.to_state for h in job.history()]
    assert states == [JobState.PENDING, JobState.ACTIVE, JobState.DONE]
    assert status.start_time <= status.end_time


def test_cancel_pending_running_unknown_and_finished(module_grid):
    from grid_tasks.errors import NotFoundError
    from grid_tasks.gram.errors import JobFinishedError

    grid = module_grid.grid
    # 8 processors in rmA: the first job fills them, the second must wait.
    running = grid.submit("&(executable=/bin/sleep)(arguments=30)(count=8)", rm="rmA")
    waiting = grid.submit("&(executable=/bin/true)(count=1)", rm="rmA")
    _wait_state(running, JobState.ACTIVE)
    _wait_started_everywhere(grid, running)  # ACTIVE comes with the first node's start
    assert waiting.status().state is JobState.PENDING
    assert waiting.cancel().state is JobState.FAILED
    cancelled = waiting.status()
    assert cancelled.gram_error == "USER_CANCELLED" and cancelled.reason == "cancelled by user"
    running.cancel()
    final = running.wait(timeout=20)
    assert final.state is JobState.FAILED and final.gram_error == "USER_CANCELLED"
    assert set(final.exit_codes) == {str(r) for r in range(8)}
    assert all(code == -9 for code in final.exit_codes.values())
    with pytest.raises(JobFinishedError, match="already"):
        grid.cancel(running.id)
    with pytest.raises(NotFoundError):
        grid.cancel(999_999)
    # the freed processors run the next job
    assert grid.submit("&(executable=/bin/true)(count=8)", rm="rmA").wait(20).state is \
        JobState.DONE


def test_bad_input_is_refused_clearly(module_grid, tmp_path):
    from grid_tasks.errors import NotFoundError
    from grid_tasks.gram.errors import JobRefusedError
    from grid_tasks.rsl import RSLError

    grid = module_grid.grid
    with pytest.raises(RSLError) as bad:
        grid.submit("&(executable=/bin/true)(count=-2)", rm="rmA")
    assert bad.value.code
    with pytest.raises(NotFoundError, match="rmZ"):
        grid.submit("&(executable=/bin/true)", rm="rmZ")
    with pytest.raises(JobRefusedError, match="can never run.*9 processors.*8") as big:
        grid.submit("&(executable=/bin/true)(count=9)", rm="rmA")
    assert big.value.code == "NO_RESOURCES"
    script = tmp_path / "not-executable.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    missing = grid.submit(f"&(executable={tmp_path}/nope)", rm="rmA")
    denied = grid.submit(f"&(executable={script})", rm="rmA")
    nodir = grid.submit(f"&(executable=/bin/true)(directory={tmp_path}/nodir)", rm="rmA")
    for handle, code in ((missing, "EXECUTABLE_NOT_FOUND"), (denied, "EXECUTABLE_PERMISSIONS"),
                         (nodir, "BAD_DIRECTORY")):
        status = handle.wait(timeout=20)
        assert status.state is JobState.FAILED and status.gram_error == code, status
        assert status.gram_error_code and status.reason


def test_admin_reservation_is_honoured(module_grid, caplog):
    from datetime import datetime, timedelta, timezone

    from grid_tasks.db import Reservation, ReservationKind, session_scope

    grid = module_grid.grid
    now = datetime.now(timezone.utc)
    with session_scope(grid.sessions) as session:
        session.add(Reservation(name="maint", rm="rmA", kind=ReservationKind.ADMIN,
                                acl={"users": ["alice"]}, nodes=["node1", "node2"],
                                start_time=now - timedelta(minutes=1),
                                end_time=now + timedelta(hours=1)))
    outsider = grid.submit("&(executable=/bin/true)", rm="rmA", user="bob")
    try:
        insider = grid.submit("&(executable=/bin/true)(count=2)", rm="rmA", user="alice")
        assert insider.wait(timeout=20).state is JobState.DONE
        # iterations ran after bob's submission (alice's job started), yet bob stays out
        assert outsider.status().state is JobState.PENDING
        assert outsider.status().nodes == {}
    finally:  # leave the shared grid idle and unreserved, whatever happened
        if not outsider.status().state.terminal:
            grid.cancel(outsider.id)
        with session_scope(grid.sessions) as session:
            session.query(Reservation).filter_by(name="maint").delete()


def _wait_state(handle, state, timeout=20.0):
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = handle.status()
        if status.state is state:
            return status
        time.sleep(0.05)
    raise AssertionError(f"job {handle.id} never {state.value}: {handle.status()}")


SUBMITTER = """
import json, sys
from grid_tasks import Grid
grid = Grid()
handles = [grid.submit("&(executable=/bin/echo)(arguments=from %s)" % sys.argv[1], rm="rmA",
                       idempotency_key="%s-%d" % (sys.argv[1], i)) for i in range(4)]
# a retried submission returns the job first submitted with that key
assert grid.submit("&(executable=/bin/false)", rm="rmA", idempotency_key=sys.argv[1] + "-0").id \\
    == handles[0].id
print(json.dumps([h.id for h in handles]))
"""


def test_concurrent_submissions_from_several_processes(module_grid):
    import json
    import subprocess
    import sys

    procs = [subprocess.Popen([sys.executable, "-c", SUBMITTER, f"p{i}"], env=module_grid.env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for i in range(3)]
    ids = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode()
        ids += json.loads(out)
    assert len(set(ids)) == 12
    grid = module_grid.grid
    for job_id in ids:
        status = grid.job(job_id).wait(timeout=30)
        assert status.state is JobState.DONE and status.exit_code == 0
    outputs = sorted(grid.job(i).output().strip() for i in ids)
    assert outputs == sorted(f"from p{i}" for i in range(3) for _ in range(4))


def _wait_started_everywhere(grid, handle, timeout=20.0):
    import time

    from grid_tasks.gram import keys

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        nodes = handle.status().nodes
        if nodes and all(grid.redis.exists(keys.lease_key(handle.id, n)) for n in nodes):
            return
        time.sleep(0.05)
    raise AssertionError(f"job {handle.id} did not start on all its nodes")
