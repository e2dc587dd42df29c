"""diagnose -j / checkjob: a waiting job's expected start names what it waits for."""

from __future__ import annotations

from grid_tasks.ops import diagnose_jobs
from grid_tasks.states import JobState

from .conftest import NOW


def test_reserved_start_names_the_running_jobs_it_waits_for(session, add_job):
    first = add_job("rmA", user="ann", state=JobState.ACTIVE, tasks=4, nodes={"a1": 4},
                    walltime=3600, started=-600)   # a1 until NOW + 3000 s
    second = add_job("rmA", user="bob", state=JobState.ACTIVE, tasks=2, nodes={"a2": 2},
                     walltime=1200, started=-600)  # half of a2 until NOW + 600 s
    wide = add_job("rmA", user="alice", tasks=8, submitted=-60)  # PRIORITY=500: reserved
    [diag] = diagnose_jobs(session, NOW, job=str(wide.id))
    [reason] = [r for r in diag.reasons if r.kind == "reservation"]
    assert "reserved to start in 00:50:00" in reason.message
    assert reason.blocking == (f"job {first.id} (running, ends in 00:50:00)",
                               f"job {second.id} (running, ends in 00:10:00)")
    assert f"waits for job {first.id} (running" in reason.message
    assert diag.to_dict()["reasons"][0]["blocking"] == list(reason.blocking)


def test_estimated_start_names_the_job_holding_its_nodes(session, add_job):
    only = add_job("rmB", user="ann", state=JobState.ACTIVE, tasks=2, nodes={"b1": 2},
                   walltime=1800, started=-600)
    waiting = add_job("rmB", user="bob", tasks=1, submitted=-60)
    [diag] = diagnose_jobs(session, NOW, job=str(waiting.id))
    assert diag.reasons, diag
    [reason] = diag.reasons
    assert reason.kind in ("reservation", "resources")
    assert reason.blocking == (f"job {only.id} (running, ends in 00:20:00)",)
