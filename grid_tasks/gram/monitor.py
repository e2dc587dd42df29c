"""A running job part as Flower sees it: a task of its own, from its start to its end.

The launch task ends as soon as the job's processes started (its job manager follows
them in a thread of the node daemon), so Flower saw a job only as a launch done in
milliseconds, and a node running jobs looked idle.  The job manager therefore sends
the task events of a pseudo-task per job part, in the node daemon's name: received
and started when its processes started, succeeded when they ended.  Flower lists it
as ``job 12 (alice) on rmA/node1``, STARTED for as long as the job runs.

A job whose program failed, was cancelled or ran out of time is the user's outcome:
the task succeeds and its result says how the job ended.  It fails only when the
grid failed the job (:data:`GRID_FAILURES`: its job manager crashed or was fenced).
Nothing here may stop a job: an event that cannot be sent is logged and dropped.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from grid_tasks.gram.launch import LaunchRequest

log = logging.getLogger(__name__)

#: Part codes of a job the grid failed (the job manager crashed, was fenced or its
#: launch superseded by recovery), as opposed to one whose program failed.
GRID_FAILURES: frozenset[str] = frozenset({"JM_STOPPED", "SYSTEM_CANCELLED"})


def task_id(req: LaunchRequest) -> str:
    """The pseudo-task's id: one per job, node and launch epoch."""
    return f"job-{req.job_id}-{req.node}-{req.token}"


def task_name(req: LaunchRequest) -> str:
    """``job 12 (alice) on rmA/node1``: the local account when the grid map chose one."""
    who = f" ({req.run_as})" if req.run_as else ""
    return f"job {req.job_id}{who} on {req.rm}/{req.node}"


class JobTask:
    """The task events of one job part, sent as node daemon ``hostname``; with no
    hostname (a job manager outside a worker) or events off, it sends nothing."""

    def __init__(self, app: Any, req: LaunchRequest, hostname: str | None) -> None:
        self.app, self.req, self.hostname = app, req, hostname
        self.enabled = bool(hostname) and bool(app.conf.worker_send_task_events)
        self.began: float | None = None  # monotonic second the start was shown

    def started(self) -> None:
        """The processes run: Flower shows the job STARTED."""
        self.began = time.monotonic()
        self._send(self._received(), ("task-started", {}))

    def ended(self, exit_codes: dict[str, int], reason: str | None, code: str | None) -> None:
        """The part ended: SUCCESS with how the job ended, FAILURE if the grid failed it."""
        runtime = time.monotonic() - self.began if self.began is not None else 0.0
        outcome = {"exit_codes": exit_codes, "reason": reason, "code": code}
        events = [] if self.began is not None else [self._received()]  # never started
        if code in GRID_FAILURES:
            events.append(("task-failed", {"exception": f"{code}: {reason}",
                                           "traceback": ""}))
        else:
            events.append(("task-succeeded", {"result": json.dumps(outcome),
                                              "runtime": runtime}))
        self._send(*events)

    def _received(self) -> tuple[str, dict[str, Any]]:
        req = self.req
        args = (f"(job={req.job_id}, rm={req.rm!r}, node={req.node!r}, tasks={req.tasks}, "
                f"executable={req.executable!r})")
        return ("task-received", {"name": task_name(req), "args": args, "kwargs": "{}",
                                  "root_id": None, "parent_id": None, "retries": 0,
                                  "eta": None, "expires": None})

    def _send(self, *events: tuple[str, dict[str, Any]]) -> None:
        if not self.enabled:
            return
        try:
            with self.app.events.default_dispatcher(hostname=self.hostname) as dispatcher:
                for kind, fields in events:
                    dispatcher.send(kind, uuid=task_id(self.req), **fields)
        except Exception as exc:  # monitoring only: the job goes on regardless
            log.warning("job %s on %s: task event not sent: %s", self.req.job_id,
                        self.req.node, exc)
