"""The job manager on real processes, real Redis and SQL.

Its reports go, as a node daemon's do, to the RM's gatekeeper: a real Celery worker
(a thread of this process) on ``gram.rmA`` records them; the node side holds no
database session.
"""

from __future__ import annotations

import os
import shutil

import pytest

from grid_tasks.states import JobState

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                                reason="needs root and useradd")


class Side:
    """A node context, and the gatekeeper's database for the assertions."""

    def __init__(self, app, ctx, sessions) -> None:
        self.app, self.ctx, self.sessions = app, ctx, sessions


@pytest.fixture
def side(quiet_settings, in_process_worker):
    """A node context on ``quiet_settings`` (demo topology's tables ready) whose reports a
    real gatekeeper worker on ``gram.rmA`` records."""
    from grid_tasks import db
    from grid_tasks.celery_app import create_app, gatekeeper_queue
    from grid_tasks.embedded.stack import prepare_database
    from grid_tasks.gram.report import node_context
    from grid_tasks.topology import load_topology

    prepare_database(quiet_settings, load_topology(quiet_settings.topology_file))
    app = create_app(quiet_settings)
    in_process_worker(app, queues=[gatekeeper_queue("rmA")])
    yield Side(app, node_context(app),
               db.session_factory(db.get_engine(quiet_settings.database_url)))


def test_walltime_limit_kills_and_says_why(side, tmp_path):
    """The job manager alone, on real processes: past max_wall_time the group dies."""
    manager = _manager(side, "&(executable=/bin/sh)(arguments=-c 'sleep 30 & sleep 30')(count=2)",
                       procs=2, max_wall_time_s=0.5)
    manager.start()
    manager.join(timeout=10)
    assert not manager.is_alive()
    row, _ = _history(side, manager.req.job_id)
    assert row.state is JobState.FAILED
    assert "max_wall_time" in row.failure_reason and row.gram_error == "JOB_EXECUTION_FAILED"
    assert row.end_time is not None
    assert [p.returncode for _, p in manager.procs] == [-9, -9]
    groups = {proc.pid for _, proc in manager.procs}
    assert _live_members(groups) == []  # the backgrounded sleeps died with their group


def _manager(side, rsl: str, procs: int = 1, **limits):
    """A job manager (not started) for ``rsl`` on rmA/node1: the job stored as launched
    there with token "tok", ``limits`` set on its launch request."""
    from datetime import datetime, timezone

    from grid_tasks import db
    from grid_tasks.gram import keys
    from grid_tasks.gram.jobmanager import JobManager
    from grid_tasks.gram.launch import requests_for
    from grid_tasks.gram.records import Outbox
    from grid_tasks.gram.submission import build_job
    from grid_tasks.rsl import lower

    with db.session_scope(side.sessions) as session:
        row = build_job(session, "rmA", rsl, lower(rsl)[0], {"user": "u"},
                        datetime.now(timezone.utc), Outbox())
        row.nodes_allocated, row.launch_token = {"node1": procs}, "tok"
        job_id = row.id
    side.ctx.redis.set(keys.token_key(job_id), "tok")
    (req,) = requests_for(job_id, "rmA", "tok", lower(rsl)[0].to_dict(), {"node1": procs}, 60)
    for name, value in limits.items():
        setattr(req, name, value)
    return JobManager(req, side.ctx)


def _live_members(groups):
    """Pids of non-zombie processes in the given process groups."""
    import os

    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) in groups and fields[0] != "Z":
            found.append(int(entry))
    return found


def test_cpu_time_and_memory_limits_fail_the_job_naming_the_limit(side):
    """max_cpu_time and max_memory become rlimits of every process; a process stopped
    by one ends the job FAILED (JOB_EXECUTION_FAILED) naming the limit, its exit code kept;
    a process under its limits ends DONE."""
    import signal
    import sys

    cases = [("&(executable=/bin/sh)(arguments=-c 'while :; do :; done')",
              {"max_cpu_time_s": 1}, -signal.SIGXCPU),
             (f"&(executable={sys.executable})(arguments=-c 'x = bytearray(400 << 20)')",
              {"max_memory_mb": 200}, 1),
             (f"&(executable={sys.executable})(arguments=-c 'x = bytearray(1 << 20)')",
              {"max_memory_mb": 200, "max_cpu_time_s": 5}, 0)]
    reasons = ["max_cpu_time of 1 s", "max_memory of 200 MB", None]
    for (rsl, limits, expected), reason in zip(cases, reasons):
        manager = _manager(side, rsl, **limits)
        manager.start()
        manager.join(timeout=20)
        row, _ = _history(side, manager.req.job_id)
        assert row.exit_code == expected, (rsl, row.exit_code)
        if reason is None:
            assert row.state is JobState.DONE and not row.gram_error
        else:
            assert row.state is JobState.FAILED, (rsl, row.state)
            assert reason in row.failure_reason and "exceeded" in row.failure_reason
            assert row.gram_error == "JOB_EXECUTION_FAILED"



def _count_writes(ctx, kinds: list) -> None:
    """Record the kind of every report the context's sender is handed, in order."""
    writer = ctx.reporter()
    real = writer.write
    writer.write = lambda report: (kinds.append(report.kind), real(report))[1]


def _history(side, job_id, ended: bool = True):
    """(row, [(state, at)]) of the job as the gatekeeper recorded it; with ``ended``,
    once it has ended (reports are recorded a moment after the job manager sent them)."""
    import time

    from grid_tasks import db

    deadline = time.monotonic() + 20
    while True:
        with db.session_scope(side.sessions) as session:
            row = db.repository.get_job(session, job_id)
            found = row, [(h.to_state, h.at) for h in row.history]
            session.expunge_all()
        if not ended or row.state.terminal or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_a_job_ending_at_once_is_reported_once_with_its_real_start(side):
    """/bin/true ends within QUICK_EXIT_S: ACTIVE and DONE are written together, ACTIVE
    at the time its process started, not when the report was written."""
    ctx = side.ctx
    manager, writes = _manager(side, "&(executable=/bin/true)"), []
    _count_writes(ctx, writes)
    manager.start()
    manager.join(timeout=10)
    assert writes == ["finished"]
    row, history = _history(side, manager.req.job_id)
    assert row.state is JobState.DONE and row.exit_code == 0
    states = [s for s, _ in history]
    assert states == [JobState.PENDING, JobState.ACTIVE, JobState.DONE]
    active_at, done_at = history[1][1], history[2][1]
    assert abs(active_at.timestamp() - manager.started) < 0.001
    assert active_at <= done_at and row.start_time == active_at


def test_a_running_job_is_reported_active_while_it_runs(side):
    """A job still running after QUICK_EXIT_S is ACTIVE in SQL before it ends."""
    import time

    ctx = side.ctx
    manager, writes = _manager(side, "&(executable=/bin/sleep)(arguments=1)"), []
    _count_writes(ctx, writes)
    manager.start()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _history(side, manager.req.job_id, False)[0] \
            .state is not JobState.ACTIVE:
        time.sleep(0.02)
    row, _ = _history(side, manager.req.job_id, False)
    assert row.state is JobState.ACTIVE and manager.is_alive()
    manager.join(timeout=10)
    assert writes == ["started", "finished"]
    row, history = _history(side, manager.req.job_id)
    assert [s for s, _ in history] == [JobState.PENDING, JobState.ACTIVE, JobState.DONE]
    assert abs(history[1][1].timestamp() - manager.started) < 0.001


def test_launch_starts_the_processes_before_returning(side):
    """launch() spawns in the caller's thread (the launch task's): when it returns, the
    process runs; a process that cannot start is reported by the job manager's thread
    like any other failure."""
    import os

    manager = _manager(side, "&(executable=/bin/sleep)(arguments=0.3)")
    manager.launch()
    ((rank, proc),) = manager.procs
    assert rank == 0 and manager.started is not None and proc.returncode is None
    assert os.path.exists(f"/proc/{proc.pid}")  # running before the thread did anything
    manager.join(timeout=10)
    assert _history(side, manager.req.job_id)[0].state is JobState.DONE
    missing = _manager(side, "&(executable=/no/such/program)")
    missing.launch()
    missing.join(timeout=10)
    assert missing.procs == [] and missing.started is None
    row, _ = _history(side, missing.req.job_id)
    assert row.state is JobState.FAILED and row.gram_error == "EXECUTABLE_NOT_FOUND"


def test_launch_claims_each_part_once_and_honours_a_cancel(side):
    """A launch starts a part only under its current token, once (a redelivered batch
    starts nothing twice); a part of a cancelled job is reported cancelled, not run."""
    from grid_tasks.gram import keys
    from grid_tasks.gram.jobmanager import RUNNING
    from grid_tasks.gram.tasks import _launch_all

    ctx = side.ctx
    first = _manager(side, "&(executable=/bin/true)").req
    assert _launch_all(side.app, [first]) == ["launched"]
    assert _launch_all(side.app, [first]) == ["skipped"]  # the same part again
    stale = _manager(side, "&(executable=/bin/true)").req
    stale.token = "superseded"
    cancelled = _manager(side, "&(executable=/bin/true)").req
    ctx.redis.set(keys.cancel_key(cancelled.job_id), 1)
    assert _launch_all(side.app, [stale, cancelled]) == ["skipped", "cancelled"]
    for manager in list(RUNNING.values()):
        manager.join(timeout=10)
    assert _history(side, cancelled.job_id)[0].state is JobState.FAILED
    assert _history(side, stale.job_id, False)[0].state is JobState.PENDING


def _account_dir(user):
    """A directory under /tmp owned by ``user`` (pytest's tmp dirs are root-only)."""
    import tempfile

    path = tempfile.mkdtemp(prefix="gt-confine-", dir="/tmp")
    os.chown(path, user.pw_uid, user.pw_gid)
    os.chmod(path, 0o755)
    return path


@needs_root
def test_output_files_are_the_accounts_own_and_stay_within_its_rights(
        side, throwaway_user, tmp_path):
    """A job mapped to an unprivileged account: its stdout/stderr files are created by
    that account (relative names in its directory); a name that climbs into a root-only
    folder is refused with OPENING_STDOUT and nothing is created there."""
    root_only = tmp_path / "root-only"
    root_only.mkdir(mode=0o700)
    home = _account_dir(throwaway_user)
    try:
        ok = _manager(side, f"&(executable=/bin/sh)(arguments=-c 'echo out; echo err >&2')"
                           f"(directory={home})(stdout=job.out)(stderr=job.err)",
                      run_as=throwaway_user.pw_name)
        climb = os.path.relpath(root_only / "stolen.out", home)
        escape = _manager(side, f"&(executable=/bin/echo)(arguments=hi)(directory={home})"
                               f"(stdout={climb})", run_as=throwaway_user.pw_name)
        for manager in (ok, escape):
            manager.start()
            manager.join(timeout=20)
        assert _history(side, ok.req.job_id)[0].state is JobState.DONE
        for name, text in (("job.out", "out\n"), ("job.err", "err\n")):
            info = os.stat(os.path.join(home, name))
            assert (info.st_uid, info.st_gid) == (throwaway_user.pw_uid, throwaway_user.pw_gid)
            with open(os.path.join(home, name)) as f:
                assert f.read() == text
        row = _history(side, escape.req.job_id)[0]
        assert row.state is JobState.FAILED and row.gram_error == "OPENING_STDOUT"
        assert "Permission denied" in row.failure_reason
        assert not (root_only / "stolen.out").exists()
    finally:
        shutil.rmtree(home, ignore_errors=True)
