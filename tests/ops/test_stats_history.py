"""showstats per period (--history), the --by-rm grouping and the fairshare column."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from grid_tasks.db import repository
from grid_tasks.ops import OpsError, show_stats
from grid_tasks.ops.stats_history import default_since, next_start, period_start, show_history
from grid_tasks.states import JobState

from .conftest import NOW

DAY = 86400.0
FS_CFG = """\
FSPOLICY        DEDICATEDPS
FSINTERVAL      24:00:00
FSDEPTH         4
FSDECAY         0.5
FSWEIGHT        1
FSUSERWEIGHT    10
USERCFG[alice]  FSTARGET=25
USERCFG[bob]    FSTARGET=50+
"""


def _record(session, add_job, rm, user, tasks, started, ended, submitted=None):
    job = add_job(rm, user=user, group="g-" + user, tasks=tasks, walltime=int(ended - started),
                  submitted=started - 60 if submitted is None else submitted,
                  started=started, ended=ended, state=JobState.DONE, exit_code=0)
    repository.record_accounting(session, job)
    return job


@pytest.fixture
def days(session, add_job):
    """alice: 4 procs for 1 h two days ago, and 2 procs over midnight last night;
    bob: 1 proc for 2 h on rmB today; one running job of alice on rmA."""
    midnight = period_start(NOW, "day")
    today = (midnight - NOW).total_seconds()  # negative offset of today's 00:00
    _record(session, add_job, "rmA", "alice", 4, today - 2 * DAY + 3600, today - 2 * DAY + 7200)
    _record(session, add_job, "rmA", "alice", 2, today - 1800, today + 1800)
    _record(session, add_job, "rmB", "bob", 1, -3 * 3600, -3600)
    add_job("rmA", user="alice", state=JobState.ACTIVE, tasks=3, nodes={"a1": 3}, started=-600)
    session.commit()
    return midnight


def test_period_arithmetic():
    t = datetime(2026, 3, 4, 12, 30, tzinfo=timezone.utc)  # a Wednesday
    assert period_start(t, "day") == datetime(2026, 3, 4, tzinfo=timezone.utc)
    assert period_start(t, "week") == datetime(2026, 3, 2, tzinfo=timezone.utc)
    assert period_start(t, "month") == datetime(2026, 3, 1, tzinfo=timezone.utc)
    dec = datetime(2025, 12, 1, tzinfo=timezone.utc)
    assert next_start(dec, "month") == datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert default_since(t, "day") == datetime(2026, 2, 26, tzinfo=timezone.utc)
    assert default_since(t, "month") == datetime(2025, 10, 1, tzinfo=timezone.utc)
    with pytest.raises(OpsError, match="unknown period 'year'"):
        period_start(t, "year")


def test_daily_history_spreads_processor_hours(session, days):
    h = show_history(session, NOW, period="day")
    assert len(h.periods) == 7 and h.periods[-1].start == days
    assert h.capacity == {"rmA": 8, "rmB": 2}
    by_day = {p.start: p for p in h.periods}
    two_ago, yesterday, today = (by_day[days - timedelta(days=n)] for n in (2, 1, 0))
    assert two_ago.total.jobs == 1 and two_ago.total.proc_hours == pytest.approx(4.0)
    # the job over midnight: 2 procs x 30 min on each side; it counts where it ended
    assert yesterday.total.jobs == 0 and yesterday.total.proc_hours == pytest.approx(1.0)
    running = 3 * 600 / 3600
    assert today.total.jobs == 2
    assert today.total.proc_hours == pytest.approx(1.0 + 2.0 + running)
    # utilization: processor-hours over 10 processors x the hours elapsed today
    assert today.utilization[None] == pytest.approx(100 * (3.0 + running) / (10 * 12))
    assert two_ago.utilization[None] == pytest.approx(100 * 4.0 / (10 * 24))
    data = h.to_dict()
    assert data["period"] == "day" and len(data["periods"]) == 7
    assert data["periods"][-1]["total"]["utilization"] is not None


def test_history_per_rm_and_per_user(session, days):
    h = show_history(session, NOW, period="week", by="rm")
    week = h.periods[-1]
    rows = {r.key: r for r in week.rows}
    assert set(rows) == {"rmA", "rmB"} and rows["rmB"].proc_hours == pytest.approx(2.0)
    hours = (NOW - week.start).total_seconds() / 3600
    assert week.utilization["rmB"] == pytest.approx(100 * 2.0 / (2 * hours))
    users = show_history(session, NOW, period="month", by="user", rm="rmA")
    month = users.periods[-1]
    assert [r.key for r in month.rows] == ["alice"] and month.total.jobs == 2
    with pytest.raises(OpsError, match="cannot group"):
        show_history(session, NOW, by="qos")


def test_showstats_by_rm(session, days):
    stats = show_stats(session, by="rm")
    rows = {r.key: r for r in stats.rows}
    assert rows["rmA"].jobs == 2 and rows["rmA"].active_procs == 3
    assert rows["rmB"].proc_hours == pytest.approx(2.0)


def test_fairshare_usage_is_the_cores(session, days, tmp_path):
    cfg = tmp_path / "maui.cfg"
    cfg.write_text(FS_CFG)
    repository.get_rm(session, "rmA").policy_file = str(cfg)
    session.commit()
    stats = show_stats(session, by="user", now=NOW)
    rows = {r.key: r for r in stats.rows}
    # only rmA has a FSPOLICY; alice is its only user: 100 % of its decayed usage
    assert set(rows["alice"].fairshare) == {"rmA"}
    assert rows["alice"].fairshare["rmA"] == {"usage": pytest.approx(100.0), "target": "25"}
    assert rows["bob"].fairshare["rmA"] == {"usage": 0.0, "target": "50+"}
    assert rows["alice"].to_dict()["fairshare"]["rmA"]["target"] == "25"
    assert show_stats(session, by="user").rows[0].fairshare == {}  # no now: no fairshare
