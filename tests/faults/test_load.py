"""The load test through the embedded demo grid: concurrent clients, every job accounted for."""

from __future__ import annotations

from pathlib import Path

import pytest

from grid_tasks.embedded.stack import EmbeddedStack, StackOptions
from grid_tasks.faults.load import run_load


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
