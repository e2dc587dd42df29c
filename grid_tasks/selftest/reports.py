"""Attack by a compromised node: it rewrites a job it never ran (issue 20, "nodes hold no
database credentials").  With no database URL its only way is a report to the RM's
gatekeeper, which checks the report against the job's own record."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from grid_tasks.db import repository, session_scope
from grid_tasks.effects import RECORD_REPORTS
from grid_tasks.gram.report_sender import FINISHED
from grid_tasks.selftest.forge import push, sealed, task_body
from grid_tasks.selftest.rows import Attack

if TYPE_CHECKING:
    from grid_tasks.selftest.target import Target

JOB_TIMEOUT_S = 60.0


class NodeRewritesJob(Attack):
    name = "node-rewrites-job"
    expected = "refused: bad_report (a node-signed end of a job under a forged token)"

    def perform(self, target: "Target") -> tuple[bool, str]:
        fg = target.fg
        job = fg.grid.submit("&(executable=/bin/true)", rm="rmA")
        status = job.wait(timeout=JOB_TIMEOUT_S)
        before_row = _row(target, job.id)
        report = {"kind": FINISHED, "job": job.id, "rm": "rmA", "node": "node1",
                  "token": "forged", "started": None,
                  "results": {"node1": {"exit_codes": {"0": 66}, "reason": "rewritten",
                                        "code": "JOB_EXECUTION_FAILED"}}}
        body = task_body(RECORD_REPORTS, {"rm": "rmA", "node": "node1", "reports": [report]})
        before = target.refusals()
        push(fg.settings.broker_url, "gram.rmA", RECORD_REPORTS, sealed(fg.keys.node, body),
             signed=True)
        counted = target.await_refusal("bad_report", before,
                                       also=lambda: _row(target, job.id) != before_row)
        time.sleep(0.3)
        if _row(target, job.id) != before_row:
            return False, f"job {job.id} was REWRITTEN: {_row(target, job.id)}"
        if not counted:
            return False, f"no 'bad_report' refusal counted in time (job {job.id} unchanged)"
        return True, (f"refused ('bad_report' counted); job {job.id} still "
                      f"{status.state.value}, exit code {before_row[1]}")


def _row(target: "Target", job_id: int) -> tuple[Any, ...]:
    """The columns of a job a rewritten end would change."""
    with session_scope(target.fg.grid.sessions) as session:
        row = repository.get_job(session, job_id)
        return (row.state, row.exit_code, row.failure_reason, row.version)
