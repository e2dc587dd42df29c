"""Every fault case against real processes: recovered within its bound, invariants kept."""

from __future__ import annotations

import pytest

from grid_tasks.faults import FaultGrid
from grid_tasks.faults.cases import RECOVERY_BOUND
from grid_tasks.faults.registry import CASES

# What each case's recovery must look like, beyond the shared invariants.
EXPECT = {
    # the launch is redone once the node is back, unless the frozen node's heartbeat
    # expired first: then it was lost, and the FAIL policy fails the job (both correct)
    "worker-mid-launch": ("ended DONE", "ended FAILED (JM_STOPPED)"),
    "worker-mid-job": "FAILED (JM_STOPPED)",  # FAIL policy: the job's node was lost
    "job-manager": "FAILED (JM_STOPPED)",
    "beat-failover": "held the lease",
    "broker-mid-enactment": "takeable again",
    "redis-restart": "jobs after restart",
}


def _report(outcome) -> str:
    return "\n".join([outcome.detail] + [f"{c.name}: {c.ok} {c.detail}" for c in outcome.checks])


@pytest.mark.parametrize("name", list(EXPECT))
def test_case_recovers_and_keeps_the_invariants(fault_grid: FaultGrid, name: str) -> None:
    outcome = CASES[name]().run(fault_grid)
    assert outcome.recovered, _report(outcome)
    assert all(c.ok for c in outcome.checks), _report(outcome)
    assert {c.name for c in outcome.checks} >= {"no lost job", "no orphan process",
                                                "no leaked reservation", "no overcommit"}
    assert 0 < outcome.recovery_s < RECOVERY_BOUND
    expected = EXPECT[name]
    assert any(e in outcome.detail for e in (expected if isinstance(expected, tuple)
                                             else (expected,))), outcome.detail
    EXTRA.get(name, lambda o: None)(outcome)


def _daemon_only(outcome) -> None:
    """Killing only the daemon process (not its group) still leaves no job process,
    and quickly: PDEATHSIG, not a later sweep."""
    gone = float(outcome.detail.split("processes gone in ")[1].split(" s")[0])
    assert gone < 5.0


def _broker(outcome) -> None:
    names = {c.name for c in outcome.checks}
    assert {"expired token starts nothing", "no leaked token", "no half-made grid reservation",
            "half-made not restored", "fresh enactment succeeds"} <= names
    # it really held what it was killed with: tokens, and the RMs' rows in SQL
    assert "2 tokens held" in outcome.detail and "2 grid reservations" in outcome.detail


EXTRA = {"job-manager": _daemon_only, "worker-mid-job": _daemon_only,
         "broker-mid-enactment": _broker}


def test_postgres_restart(fault_grid: FaultGrid) -> None:
    from grid_tasks.faults.postgres import PostgresUnavailable, find_bin_dir

    try:
        find_bin_dir()
    except PostgresUnavailable as exc:
        pytest.skip(str(exc))
    outcome = CASES["postgres-restart"]().run(fault_grid)
    assert outcome.ok, _report(outcome)
    assert outcome.detail.count("DONE") >= 4 or "FAILED" in outcome.detail
