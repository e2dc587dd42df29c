"""showstats from accounting records written by grid_tasks.db.repository.record_accounting."""

from __future__ import annotations

from datetime import timedelta

import pytest

from grid_tasks.db import repository
from grid_tasks.ops import OpsError, show_stats
from grid_tasks.states import JobState

from .conftest import NOW


@pytest.fixture
def finished(session, add_job):
    """alice: two jobs (one failed), bob: one job on rmB; plus one running job of alice."""
    spec = [  # rm, user, group, tasks, walltime, submitted, started, ended, state
        ("rmA", "alice", "phys", 4, 3600, -7200, -6600, -3000, JobState.DONE),
        ("rmA", "alice", "phys", 2, 1800, -4000, -3900, -3000, JobState.FAILED),
        ("rmB", "bob", "chem", 1, 600, -1000, -700, -100, JobState.DONE),
    ]
    jobs = []
    for rm, user, group, tasks, wall, sub, start, end, state in spec:
        job = add_job(rm, user=user, group=group, tasks=tasks, walltime=wall, submitted=sub,
                      started=start, ended=end, state=state, exit_code=0 if state is
                      JobState.DONE else 1)
        repository.record_accounting(session, job)
        jobs.append(job)
    add_job("rmA", user="alice", group="phys", state=JobState.ACTIVE, tasks=3,
            nodes={"a1": 3}, started=-50)
    session.commit()
    return jobs


def test_totals_and_per_user(session, finished):
    stats = show_stats(session, by="user")
    # processor-seconds: 4 x 3600 + 2 x 900 + 1 x 600
    assert stats.total.proc_seconds == pytest.approx(4 * 3600 + 2 * 900 + 600)
    assert (stats.total.jobs, stats.total.succeeded, stats.total.failed) == (3, 2, 1)
    assert (stats.total.active_jobs, stats.total.active_procs) == (1, 3)
    rows = {r.key: r for r in stats.rows}
    alice, bob = rows["alice"], rows["bob"]
    assert alice.jobs == 2 and alice.active_procs == 3
    assert alice.mean_wait == pytest.approx((600 + 100) / 2)
    # xfactor = (wait + requested walltime) / requested walltime
    assert alice.max_xfactor == pytest.approx((600 + 3600) / 3600)
    assert bob.mean_xfactor == pytest.approx((300 + 600) / 600)
    assert alice.share + bob.share == pytest.approx(100.0)
    assert bob.share == pytest.approx(100 * 600 / stats.total.proc_seconds)
    assert [r.key for r in stats.rows] == ["alice", "bob"]  # heaviest first


def test_group_rm_and_window_filters(session, finished):
    groups = show_stats(session, by="group", rm="rmA").to_dict()
    assert [r["key"] for r in groups["rows"]] == ["phys"] and groups["total"]["jobs"] == 2
    recent = show_stats(session, since=NOW - timedelta(seconds=500))
    assert recent.total.jobs == 1  # only bob's ended in the last 500 s
    with pytest.raises(OpsError, match="cannot group statistics by 'qos'"):
        show_stats(session, by="qos")
