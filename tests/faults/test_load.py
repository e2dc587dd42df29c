"""The load test through the embedded demo grid: concurrent clients, every job accounted for."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from grid_tasks import db
from grid_tasks.embedded.stack import EmbeddedStack, StackOptions, prepare_database
from grid_tasks.faults.load import _counts, run_load
from grid_tasks.gram.records import Outbox
from grid_tasks.gram.submission import build_job
from grid_tasks.rsl import lower
from grid_tasks.states import JobState
from grid_tasks.topology import load_topology


def _load(tmp_path: Path, clients: int, per_client: int):
    stack = EmbeddedStack(StackOptions(state_dir=tmp_path / "stack", loglevel="WARNING"))
    settings = stack.start()
    try:
        return run_load(settings, clients, per_client, rms=["rmA", "rmB"], timeout=300)
    finally:
        pids = stack.pids()
        stack.stop()
        from grid_tasks.embedded.supervisor import leftover

        assert leftover(pids) == []


@pytest.mark.slow  # ~90 s: a whole embedded stack of its own
def test_eight_clients_every_job_accounted_for(tmp_path: Path) -> None:
    result = _load(tmp_path, 8, 4)
    assert result.jobs == 32 and result.done == 32 and result.failed == 0, result.to_dict()
    assert result.accounted == 32 and result.duplicate_ids == 0
    assert result.missing_accounting == 0 and result.ok


@pytest.mark.slow  # 8 x 100 jobs: minutes on a 2-core machine
def test_eight_clients_hundred_jobs_each(tmp_path: Path) -> None:
    result = _load(tmp_path, 8, 100)
    assert result.ok and result.done == 800, result.to_dict()


def test_counts_are_of_the_loads_jobs_only(settings) -> None:
    """The wait polls an id range when only the load's jobs lie in it, and the ids
    themselves when another job does: a job of someone else is never counted."""
    prepare_database(settings, load_topology(settings.topology_file))
    sessions = db.session_factory(db.get_engine(settings.database_url))
    rsl = "&(executable=/bin/true)"
    try:
        with db.session_scope(sessions) as s:
            rows = [build_job(s, "rmA", rsl, lower(rsl)[0], {"user": "u"},
                              datetime.now(timezone.utc), Outbox()) for _ in range(4)]
            s.flush()
            for row in rows:
                row.state = JobState.DONE
            ids = [row.id for row in rows]
        with db.session_scope(sessions) as s:
            assert _counts(s, ids)["DONE"] == 4  # the whole range is the load's
            assert _counts(s, ids[:2])["DONE"] == 2  # later jobs lie above the range
            assert _counts(s, [ids[0], ids[1], ids[3]])["DONE"] == 3  # ids[2] is not ours
    finally:
        db.dispose_engines(settings.database_url)
