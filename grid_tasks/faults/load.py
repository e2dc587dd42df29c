"""The load test: N client processes submit /bin/true jobs to a running grid; every job
must end, with one accounting record, and none twice.

    python -m grid_tasks.faults.load CLIENT_JSON   # one client (internal)
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import func, select

from grid_tasks.client import Grid
from grid_tasks.db import get_engine, session_factory, session_scope
from grid_tasks.db.models import AccountingRecord, Job
from grid_tasks.errors import GridTasksError
from grid_tasks.settings import Settings

RSL = "&(executable=/bin/true)"


@dataclass
class LoadResult:
    """Figures and the accounting verdict of one load run."""

    clients: int
    jobs: int
    submit_s: float           # first submission to the last client's last one
    complete_s: float         # first submission to the last job terminal
    done: int
    failed: int
    accounted: int
    duplicate_ids: int
    missing_accounting: int

    @property
    def submit_rate(self) -> float:
        return self.jobs / self.submit_s if self.submit_s else 0.0

    @property
    def throughput(self) -> float:
        return self.jobs / self.complete_s if self.complete_s else 0.0

    @property
    def ok(self) -> bool:
        return (self.done + self.failed == self.jobs and self.accounted == self.jobs
                and not self.duplicate_ids and not self.missing_accounting)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "submit_rate": self.submit_rate,
                "throughput": self.throughput, "ok": self.ok}


def _client(cfg: dict[str, Any]) -> None:
    rms = cfg["rms"]
    ids = []
    with Grid(Settings.from_env(cfg["env"])) as grid:
        for i in range(cfg["jobs"]):
            ids.append(grid.submit(RSL, rm=rms[i % len(rms)], user=f"load{cfg['index']}").id)
    print(json.dumps({"ids": ids, "end": time.time()}), flush=True)


def run_load(settings: Settings, clients: int, per_client: int, *, rms: list[str],
             timeout: float = 600.0, progress: Callable[[int, int], None] | None = None
             ) -> LoadResult:
    """Run ``clients`` submitting processes of ``per_client`` jobs each; wait; account."""
    env = settings.to_env()
    start = time.time()
    procs = [subprocess.Popen(
        [sys.executable, "-m", "grid_tasks.faults.load",
         json.dumps({"env": env, "jobs": per_client, "rms": rms, "index": i})],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(clients)]
    ids: list[int] = []
    last_submit = start
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=max(1.0, start + timeout - time.time()))
            if proc.returncode != 0:
                raise GridTasksError(f"load client failed: {err.strip()[-400:]}")
            report = json.loads(out.strip().splitlines()[-1])
            ids += report["ids"]
            last_submit = max(last_submit, report["end"])
    except subprocess.TimeoutExpired:
        raise GridTasksError(f"load: the clients did not submit within {timeout:g} s") from None
    finally:  # a failed or timed-out run leaves no client submitting behind it
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    total = clients * per_client
    _wait_terminal(settings, ids, start + timeout, progress)
    return _account(settings, ids, total, clients, last_submit - start, time.time() - start)


def _ours(session: Any, ids: list[int]) -> tuple[Any, Any]:
    """Conditions selecting the load's jobs and their accounting records: an id range
    when every job in it is the load's (a fresh grid: the wait polls twice a second,
    and an IN list binds every id, 10,000 of them at full size), else the ids."""
    low, high = min(ids), max(ids)
    inside = session.scalar(select(func.count()).where(Job.id.between(low, high)))
    if inside == len(set(ids)):  # ids only grow: no later job falls inside the range
        return Job.id.between(low, high), AccountingRecord.job_id.between(low, high)
    return Job.id.in_(ids), AccountingRecord.job_id.in_(ids)


def _counts(session: Any, ids: list[int]) -> dict[str, int]:
    jobs, accounting = _ours(session, ids) if ids else (Job.id.in_(ids),
                                                        AccountingRecord.job_id.in_(ids))
    states = dict(session.execute(select(Job.state, func.count()).where(jobs)
                                  .group_by(Job.state)).all())
    records = session.execute(select(AccountingRecord.job_id, func.count())
                              .where(accounting)
                              .group_by(AccountingRecord.job_id)).all()
    states = {getattr(k, "value", k): n for k, n in states.items()}
    return {"DONE": states.get("DONE", 0), "FAILED": states.get("FAILED", 0),
            "accounted": len(records), "dups": sum(1 for _, n in records if n > 1)}


def _wait_terminal(settings: Settings, ids: list[int], deadline: float,
                   progress: Callable[[int, int], None] | None) -> None:
    factory = session_factory(get_engine(settings.database_url))
    while True:
        with session_scope(factory) as session:
            counts = _counts(session, ids)
        finished = counts["DONE"] + counts["FAILED"]
        if progress:
            progress(finished, len(ids))
        if finished >= len(ids) and counts["accounted"] >= len(ids):
            return
        if time.time() > deadline:
            raise GridTasksError(f"load: only {finished} of {len(ids)} jobs ended in time")
        time.sleep(0.5)


def _account(settings: Settings, ids: list[int], total: int, clients: int,
             submit_s: float, complete_s: float) -> LoadResult:
    with session_scope(session_factory(get_engine(settings.database_url))) as session:
        counts = _counts(session, ids)
    return LoadResult(clients, total, submit_s, complete_s, counts["DONE"], counts["FAILED"],
                      counts["accounted"], counts["dups"] + (len(ids) - len(set(ids))),
                      len(set(ids)) - counts["accounted"])


if __name__ == "__main__":
    _client(json.loads(sys.argv[1]))
