"""The node side of job managers' reports: sent to the RM's gatekeeper, in batches.

Node daemons hold no database credentials (a compromised node could otherwise
rewrite any job, and a large grid ran out of database connections: one pool per
daemon).  A job manager's STARTED or FINISHED report becomes part of a signed
message ``record_reports`` on its RM's gatekeeper queue, which checks it against
the job's record and writes it (:mod:`grid_tasks.gram.report_writer`).

A :class:`ReportSender` per process takes every report waiting when it becomes
free and sends them in one message, as the SQL writer before it took them into one
transaction.  A caller returns once the broker holds its message: the message is
durable and the gatekeeper acknowledges it only after the commit, so that is the
honest equivalent of "committed".  Publishing retries while the broker is briefly
away (about 25 s) and raises after that.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from grid_tasks.errors import GridTasksError

log = logging.getLogger(__name__)

#: Reports per message (and so per gatekeeper transaction) at most.
MAX_BATCH = 200
STARTED, FINISHED = "started", "finished"


@dataclass
class Report:
    """One job manager's report: ``started`` on a node, or ``finished`` with all parts."""

    kind: str
    req: Any  # the LaunchRequest (a LaunchRef once received)
    results: dict[str, Any] = field(default_factory=dict)  # node -> part (finished)
    started: float | None = None  # POSIX time the processes started (started)
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


@dataclass(frozen=True)
class LaunchRef:
    """What a received report says of its launch: job, RM, reporting node, token."""

    job_id: int
    rm: str
    node: str
    token: str


def to_wire(report: Report) -> dict[str, Any]:
    """``report`` as a message carries it (only what recording needs)."""
    req = report.req
    return {"kind": report.kind, "job": int(req.job_id), "rm": req.rm, "node": req.node,
            "token": req.token, "results": report.results, "started": report.started}


def from_wire(data: Any) -> Report:
    """A report as sent by :func:`to_wire`; GridTasksError if it is not one."""
    try:
        kind = str(data["kind"])
        if kind not in (STARTED, FINISHED):
            raise ValueError(f"kind {kind!r}")
        ref = LaunchRef(int(data["job"]), str(data["rm"]), str(data["node"]),
                        str(data["token"]))
        results = {str(k): dict(v) for k, v in dict(data.get("results") or {}).items()}
        started = data.get("started")
        return Report(kind, ref, results, None if started is None else float(started))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise GridTasksError(f"a malformed job report ({exc})") from None


class ReportSender:
    """Batches the reports of one process's job managers (see the module doc).

    No thread of its own: the first caller that finds nobody sending sends, taking
    every report queued meanwhile along with its own; callers arriving during a send
    wait for the next batch, sent by one of them.
    """

    def __init__(self, send: Callable[[list[Report]], None]) -> None:
        self._send = send
        self._pending: list[Report] = []
        self._cond = threading.Condition()
        self._sending = False

    def write(self, report: Report) -> None:
        """Queue ``report`` and return once the broker holds it; re-raises its failure."""
        with self._cond:
            self._pending.append(report)
            while not report.done.is_set() and self._sending:
                self._cond.wait()
            lead = not report.done.is_set()
            if lead:
                self._sending = True
        if lead:
            try:
                while not report.done.is_set():  # its own is in the first batch or next
                    with self._cond:
                        batch = self._pending[:MAX_BATCH]
                        del self._pending[:MAX_BATCH]
                    self._send_safely(batch)
                    with self._cond:
                        self._cond.notify_all()  # their reports are done
            finally:
                with self._cond:
                    self._sending = False
                    self._cond.notify_all()  # one of those still queued sends next
        if report.error is not None:
            raise report.error

    def _send_safely(self, batch: list[Report]) -> None:
        try:
            self._send(batch)
        except BaseException as exc:  # noqa: BLE001 - every waiter must wake up
            for report in batch:
                report.error = exc
            if not isinstance(exc, Exception):
                raise
        finally:
            for report in batch:
                report.done.set()
