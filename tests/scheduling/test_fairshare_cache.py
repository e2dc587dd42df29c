"""Fairshare usage kept between iterations equals usage charged from scratch."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from grid_tasks import db
from grid_tasks.embedded.stack import prepare_database
from grid_tasks.scheduling import state
from grid_tasks.scheduling.state import load_scheduler
from grid_tasks.states import JobState
from grid_tasks.topology import load_topology


@pytest.fixture
def sessions(settings):
    prepare_database(settings, load_topology(settings.topology_file))  # demo maui.cfg: FS on
    yield db.session_factory(db.get_engine(settings.database_url))
    db.dispose_engines(settings.database_url)


def _records(sessions, first: int, count: int, user: str) -> None:
    end = datetime.now(timezone.utc) - timedelta(minutes=5)
    with db.session_scope(sessions) as s:
        for i in range(first, first + count):
            s.add(db.AccountingRecord(job_id=i, rm="rmA", user=user, group="g", procs=2,
                                      start_time=end - timedelta(seconds=30 + i),
                                      end_time=end, final_state=JobState.DONE))


def _shares(sessions) -> dict[str, float]:
    now = time.time()
    with db.session_scope(sessions) as s:
        fs = load_scheduler(s, "rmA", now=now).fairshare
        assert fs.enabled
        return {u: fs.percent("USER", u, now) for u in ("alice", "bob")}


def _from_scratch(sessions) -> dict[str, float]:
    state._usage.clear()
    return _shares(sessions)


def test_incremental_usage_matches_a_full_recharge(sessions):
    _records(sessions, 1, 30, "alice")
    first = _shares(sessions)
    assert first["alice"] == pytest.approx(100.0) and first["bob"] == 0.0
    _records(sessions, 100, 10, "bob")  # charged on top of what is cached
    incremental = _shares(sessions)
    assert 0 < incremental["bob"] < incremental["alice"]
    assert incremental == pytest.approx(_from_scratch(sessions))
    assert _shares(sessions) == pytest.approx(incremental)  # nothing charged twice
    with db.session_scope(sessions) as s:  # records purged: usage is rebuilt, not stale
        s.query(db.AccountingRecord).filter(db.AccountingRecord.user == "alice").delete()
    assert _shares(sessions) == {"alice": 0.0, "bob": pytest.approx(100.0)}


def test_many_new_records_are_charged_in_batches_each_once(sessions, monkeypatch):
    monkeypatch.setattr(state, "_CHUNK", 7)  # 30 + 10 records: several batches each time
    state._usage.clear()
    _records(sessions, 1, 30, "alice")
    _records(sessions, 200, 10, "bob")
    batched = _shares(sessions)
    assert _shares(sessions) == pytest.approx(batched)  # nothing charged twice
    (entry,) = [e for k, e in state._usage.items() if k[1] == "rmA"]
    assert len(entry.charged) == 40 and entry.seen == max(entry.charged)
    assert batched == pytest.approx(_from_scratch(sessions))


def test_a_record_appearing_below_the_newest_charged_one_is_charged(sessions):
    _records(sessions, 1, 5, "alice")
    _records(sessions, 50, 5, "alice")
    _shares(sessions)
    with db.session_scope(sessions) as s:  # an id below the newest: reused after a purge
        end = datetime.now(timezone.utc) - timedelta(minutes=5)
        s.add(db.AccountingRecord(id=20, job_id=20, rm="rmA", user="bob", group="g", procs=2,
                                  start_time=end - timedelta(seconds=60), end_time=end,
                                  final_state=JobState.DONE))
    assert _shares(sessions)["bob"] > 0
    assert _shares(sessions) == pytest.approx(_from_scratch(sessions))
