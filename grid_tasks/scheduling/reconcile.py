"""What the database missed while it was away, written by the RM's iteration.

A job's end travels from its job managers to SQL as a report message to the RM's
gatekeeper (:mod:`grid_tasks.gram.report_tasks`), which retries through any outage.
But the message is not the only record: every node's part stays in Redis
(``keys.parts_key``) until the end is in SQL, and the lease is gone, so recovery
rightly never takes such a job for lost.  Should the message be lost anyway (a
gatekeeper's bug, a purged queue, a report refused in a race), the job would stay
ACTIVE forever with its nodes held and the RM's queue stopped behind it - a
scheduler restart changes nothing, since nothing else looks.  So every full
iteration looks (:func:`reconcile`, before recovery):

* an ACTIVE job (or a launch not yet confirmed) of the RM whose every allocated node
  has reported its part under the job's current launch token gets its end written -
  the very rows, checks and accounting of the gatekeeper's path
  (:func:`~grid_tasks.gram.report_writer.apply_reports`), so a late report message
  finds it ended and changes nothing (exactly once: the first ending stands, and
  the version guard makes a concurrent writer lose its whole transaction);
* it waits :data:`GRACE_S` after first seeing such a job, so the normal report, a
  few milliseconds behind, is not raced on every job's end - except for a launch
  already past its confirmation timeout, which recovery would otherwise roll back
  (and launch again) in this very iteration;
* a launch unconfirmed in SQL past its confirmation timeout whose first node recorded
  its start in Redis is confirmed ACTIVE (its report was lost or is late) rather than
  rolled back by recovery, which would kill the running job and launch it again;
* cancels the gatekeeper took while the database was away
  (:func:`~grid_tasks.gram.submission.accept_cancel`) are applied: the owner checked
  where that was due, the cancel flag set, an idle job FAILED as cancelled.  An
  entry goes once SQL shows the job ended, so a rolled-back iteration loses none.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from grid_tasks.db import repository
from grid_tasks.db.models import Job as JobRow
from grid_tasks.errors import GridTasksError
from grid_tasks.gram import keys
from grid_tasks.gram.keys import CANCEL_TTL_S
from grid_tasks.gram.records import Outbox, finish
from grid_tasks.gram.report import settle_parts
from grid_tasks.gram.report_checks import report_refusal
from grid_tasks.gram.report_sender import FINISHED, STARTED, LaunchRef, Report
from grid_tasks.gram.report_writer import apply_reports
from grid_tasks.scheduling.job_rows import holding_nodes
from grid_tasks.security.authorization import check_owner
from grid_tasks.states import JobState, MauiJobState

log = logging.getLogger(__name__)

#: How long a finished launch's parts are seen complete in Redis, with its end not in
#: SQL, before the iteration writes the end itself (seconds).
GRACE_S = 2.0
#: How long the first sighting is remembered (seconds).
SEEN_TTL_S = 3600

# Built once (every full iteration runs it): jobs that may have ended unrecorded.
_OPEN = select(JobRow.id, JobRow.launch_token, JobRow.nodes_allocated, JobRow.state,
               JobRow.start_time).where(
    holding_nodes(bindparam("rm")), JobRow.launch_token.is_not(None))


def seen_key(job_id: int, token: str) -> str:
    """When the iteration first saw launch ``token``'s parts complete, unrecorded."""
    return f"grid_tasks:gram:{job_id}:{token}:unrecorded"


def reconcile(session: Session, rm: str, now: datetime, redis: Any, outbox: Outbox, *,
              overdue: float, settings: Any = None) -> list[int]:
    """Write the ends (and late starts) ``rm``'s jobs have only in Redis and apply the
    cancels taken during an outage (see the module doc), in the iteration's
    transaction; the ids of the jobs written.  ``overdue``: the launch confirmation
    timeout (seconds)."""
    ended = _ends_in_redis(session, rm, now, redis, overdue)
    if ended:
        outbox.merge(apply_reports(session.connection(), ended, _vet(rm), now))
        # their parts expire in an hour now (should this transaction roll back, the
        # next iteration writes them again well within that)
        settle_parts(redis, [r.req for r in ended if r.kind == FINISHED])
        log.warning("%s: starts or ends of jobs %s were only in Redis (report lost or "
                    "late): recorded", rm, [r.req.job_id for r in ended])
    _pending_cancels(session, rm, now, redis, outbox, settings)
    return [r.req.job_id for r in ended]


def _ends_in_redis(session: Session, rm: str, now: datetime, redis: Any,
                   overdue: float) -> list[Report]:
    """FINISHED reports of the open jobs of ``rm`` whose parts are all in Redis and due,
    and STARTED reports of unconfirmed launches past ``overdue`` that Redis knows started
    (see :func:`_confirmations`)."""
    rows = list(session.connection().execute(_OPEN, {"rm": rm}))
    if not rows:
        return []
    pipe = redis.pipeline(transaction=False)
    for row in rows:
        pipe.hgetall(keys.parts_key(row.id, row.launch_token))
    complete, open_rows = [], []
    for row, raw in zip(rows, pipe.execute()):
        nodes = set(row.nodes_allocated or {})
        results = _parts(row.id, raw)
        if nodes and results is not None and nodes <= set(results):
            complete.append((row, results))
        else:
            open_rows.append(row)
    out = _confirmations(redis, rm, open_rows, now, overdue)
    if complete:
        due = _due(redis, complete, now, overdue)
        out += [Report(FINISHED, LaunchRef(row.id, rm, min(results), row.launch_token),
                       results) for row, results in complete if row.id in due]
    return out


def _confirmations(redis: Any, rm: str, rows: list[Any], now: datetime,
                   overdue: float) -> list[Report]:
    """STARTED reports for launches still unconfirmed in SQL past ``overdue`` whose first
    node recorded its start in Redis (``keys.started_key``): their ACTIVE report was
    lost or is late, and recovery would otherwise roll them back - killing a running
    job and launching it again - in this very iteration."""
    stamp = now.timestamp()
    late = [row for row in rows if JobState(row.state) is JobState.PENDING
            and row.start_time is not None and stamp - row.start_time.timestamp() >= overdue]
    if not late:
        return []
    pipe = redis.pipeline(transaction=False)
    for row in late:
        pipe.get(keys.started_key(row.id, row.launch_token))
    return [Report(STARTED, LaunchRef(row.id, rm, _text(node), row.launch_token))
            for row, node in zip(late, pipe.execute()) if node]


def _parts(job_id: int, raw: dict[Any, Any]) -> dict[str, dict[str, Any]] | None:
    """The parts of a parts hash as node -> dict; None (and a log) if one is malformed."""
    try:
        out = {_text(k): json.loads(v) for k, v in raw.items()}
    except (ValueError, TypeError) as exc:
        log.error("job %s: a malformed part in Redis (%s); left to its report", job_id, exc)
        return None
    if not all(isinstance(p, dict) for p in out.values()):
        log.error("job %s: a part in Redis is not an object; left to its report", job_id)
        return None
    return out


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _due(redis: Any, complete: list[tuple[Any, dict[str, Any]]], now: datetime,
         overdue: float) -> set[int]:
    """The ids among ``complete`` to write now: first seen complete :data:`GRACE_S` ago
    or more (remembered in Redis across iterations and processes), or unconfirmed
    launches past ``overdue`` (recovery would roll them back otherwise)."""
    stamp = now.timestamp()
    pipe = redis.pipeline(transaction=False)
    for row, _ in complete:
        pipe.set(seen_key(row.id, row.launch_token), repr(stamp), nx=True, ex=SEEN_TTL_S)
        pipe.get(seen_key(row.id, row.launch_token))
    raw = pipe.execute()
    due = set()
    for i, (row, _) in enumerate(complete):
        first = float(_text(raw[2 * i + 1] or repr(stamp)))
        started = row.start_time.timestamp() if row.start_time else stamp
        unconfirmed = JobState(row.state) is JobState.PENDING
        if stamp - first >= GRACE_S or (unconfirmed and stamp - started >= overdue):
            due.add(row.id)
    return due


def _vet(rm: str) -> Any:
    """The gatekeeper's own check of a report, applied to the parts in Redis."""
    def vet(report: Report, row: Any) -> str | None:
        req = report.req
        reason = report_refusal(rm, req.node, req.job_id, req.token, report.results, row)
        if reason is not None:
            log.warning("%s: end of job %s in Redis not recorded: %s", rm, req.job_id, reason)
        return reason

    return vet


def _pending_cancels(session: Session, rm: str, now: datetime, redis: Any,
                     outbox: Outbox, settings: Any) -> None:
    """Apply the cancels ``rm``'s gatekeeper took while the database was away."""
    pending = redis.hgetall(keys.pending_cancels_key(rm))
    done = []
    for raw_id, raw_who in sorted(pending.items()):
        job_id, who = int(_text(raw_id)), _text(raw_who)
        if _apply_cancel(session, rm, job_id, who, now, redis, outbox, settings):
            done.append(str(job_id))
    if done:
        redis.hdel(keys.pending_cancels_key(rm), *done)


def _apply_cancel(session: Session, rm: str, job_id: int, who: str, now: datetime,
                  redis: Any, outbox: Outbox, settings: Any) -> bool:
    """One taken cancel; True once it needs no more looking at (the job ended in SQL,
    or the cancel was refused)."""
    try:
        row = repository.get_job(session, job_id)
        if row.rm != rm:
            raise GridTasksError(f"job {job_id} is not a job of {rm}")
        if who:  # the owner check the outage postponed ("-": nobody verified)
            check_owner(settings, row.owner, None if who == "-" else who,
                        f"job {job_id} on {rm}", rm=rm)
    except GridTasksError as exc:
        log.warning("%s: cancel of job %s taken during an outage refused: %s", rm, job_id,
                    exc)
        return True
    if JobState(row.state).terminal:
        return True
    redis.set(keys.cancel_key(job_id), 1, ex=CANCEL_TTL_S)
    if row.state is JobState.PENDING and row.maui_state is not MauiJobState.STARTING:
        finish(session, row, JobState.FAILED, "cancelled by user", now, outbox,
               gram_error="USER_CANCELLED")
    return False  # dropped by the next iteration, which sees the end committed
