"""One live Maui iteration of a resource manager, applied transactionally (outbox style).

1. reconciliation (ends and cancels only Redis knows of, after a database outage:
   :mod:`~grid_tasks.scheduling.reconcile`), then recovery: fences whose deadline
   passed release their nodes (a requeued job goes back to Idle); unconfirmed launches
   and lost job managers are fenced (:mod:`grid_tasks.scheduling.fences`);
2. the pure core loaded from SQL decides (:func:`~grid_tasks.scheduling.state.load_scheduler`);
3. every start is committed as Maui ``Starting`` with its allocation and a fresh
   launch token, in the same transaction;
4. only then the token goes to Redis and one launch task per node is published;
   a publish failure sends the job back to Idle.  A launch that never confirms
   is rolled back by step 1 of a later iteration.

What time alone makes due - a launch timeout, a fence deadline - gets an iteration
sent for that moment (:func:`_wake_when_due`), so a killed daemon's jobs start again
within :func:`~grid_tasks.scheduling.recovery.redelivery_bound`, not a poll later.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import bindparam, func, select, update

from grid_tasks.db import ConcurrentUpdateError, repository, session_scope
from grid_tasks.db.models import Job as JobRow
from grid_tasks.effects import queued_key, send_iteration, send_launch_batch
from grid_tasks.gram import keys
from grid_tasks.gram.launch import LaunchRequest, requests_for
from grid_tasks.gram.records import Outbox
from grid_tasks.gram.report import PARTS_TTL_S
from grid_tasks.leases import fence_span
from grid_tasks.maui.modules import Observers
from grid_tasks.schedmods import ModuleContext, scheduler_parts
from grid_tasks.schedmods.jobchecker import CheckReport, DeferPolicy, JobChecker, release_deferred
from grid_tasks.scheduling import fences, grid_reservations
from grid_tasks.scheduling.idle_queue import forgotten_on_error
from grid_tasks.scheduling.reconcile import reconcile
from grid_tasks.scheduling.recovery import defer, launch_timeout, node_failure_policy, recover
from grid_tasks.scheduling.state import (
    load_scheduler, maui_config, policy_config, rm_policy_file,
)
from grid_tasks.settings import Settings, app_settings
from grid_tasks.states import JobState, MauiJobState

log = logging.getLogger(__name__)


@dataclass
class IterationReport:
    """What one iteration did (for logs, tests and the benchmark)."""

    rm: str
    started: list[int] = field(default_factory=list)
    recovered: list[int] = field(default_factory=list)
    reconciled: list[int] = field(default_factory=list)  # ends found only in Redis
    rolled_back: list[int] = field(default_factory=list)
    busy: bool = False  # jobs are starting or running: keep watching leases
    released: list[int] = field(default_factory=list)  # fenced jobs back to Idle
    due_at: float | None = None  # POSIX time a launch timeout or fence deadline is due


def run_iteration(app: Any, rm: str, *, sessions: Any, redis: Any, registry: Any = None,
                  now: float | None = None, quick: bool = False,
                  settings: Settings | None = None) -> IterationReport:
    """Run one iteration of ``rm`` and launch what it started.

    ``quick``: the pass a gatekeeper runs in place right after storing a job (as
    Slurm's scheduling on submit is a quick pass beside the periodic backfill): the
    same decision, without the time-driven housekeeping - recovery of launches past
    their timeout and of expired leases, deferred jobs whose DEFERTIME is over.
    Nothing becomes due there by a submission; the RM's full iterations (beat, the
    lease watch, every trigger) do it.  ``settings``: the worker's (default: the
    app's), for the RM's scheduler modules."""
    began = time.perf_counter()
    now = time.time() if now is None else now
    at = datetime.fromtimestamp(now, tz=timezone.utc)
    report, outbox = IterationReport(rm), Outbox()
    settings = settings or app_settings(app)
    # (a rolled-back iteration may have read the idle queue with its own writes)
    with forgotten_on_error(rm), session_scope(sessions) as session:
        policy_file = rm_policy_file(session, rm)
        cfg = maui_config(policy_file)
        deferral = DeferPolicy.from_config(cfg)
        modules = _modules(settings, rm, cfg, session)
        if not quick:
            _housekeeping(session, rm, policy_file, at, redis, outbox, deferral, modules,
                          report, settings)
        guard = grid_reservations.prepare(session, rm, now, redis)  # restore, prune
        sched = load_scheduler(session, rm, now=now, registry=registry, observed=bool(modules),
                               idle_if_free=True, config=policy_config(policy_file),
                               kept=True)
        # the core decides without effects; its modules observe the result afterwards,
        # inside this transaction (a module's SQL error rolls the iteration back)
        observers = Observers(modules)
        observers.started(sched)
        result = observers.iterate(sched, now)
        vetoed = guard.veto(session, result.started)  # start_object(token) of bound jobs
        starts = [s for s in result.started if s.job_id not in vetoed]
        launches = _mark_starting(session, rm, starts, at)
        report.started = [int(s.job_id) for s in starts]
        # Jobs running (leases to watch) or waiting (e.g. for a silent node to come
        # back): look again soon rather than only at the next RMPOLLINTERVAL.
        # (a full machine's idle queue is not read: its running jobs make it busy)
        report.busy = bool(report.started or sched.running_jobs() or sched.idle_count())
        report.due_at = _due_at(session, rm, at, quick, bool(launches))
    _publish(app, redis, launches, sessions, report, deferral)
    outbox.flush(redis, app)
    _wake_when_due(app, redis, rm, report.due_at, now)
    if log.isEnabledFor(logging.INFO):  # nothing_free rebuilds a curve over every node
        idle = sched.idle_count()
        log.info("iterate %s: %s, %d started, %d recovered in %.1f ms", rm,
                 f"{idle} idle" if idle or not sched.nothing_free(now)
                 else "full (idle queue unread)", len(report.started), len(report.recovered),
                 (time.perf_counter() - began) * 1e3)
    return report


def _housekeeping(session: Any, rm: str, policy_file: str | None, at: datetime, redis: Any,
                  outbox: Outbox, deferral: DeferPolicy, modules: list[Any],
                  report: IterationReport, settings: Settings) -> None:
    """What only time makes due: ends and cancels SQL missed, fences past their
    deadline, lost launches and leases, deferrals that are over."""
    policy = node_failure_policy(policy_file)
    report.reconciled = reconcile(session, rm, at, redis, outbox,
                                  overdue=launch_timeout(), settings=settings)
    report.released = fences.release_due(session, rm, at)
    report.recovered = recover(session, rm, at, redis, outbox, policy, launch_timeout(),
                               fence_span(settings))
    if not any(isinstance(m, JobChecker) for m in modules):
        # without the jobchecker module deferred jobs would never come back
        release_deferred(session, deferral, at.timestamp(), rm, CheckReport())
    session.flush()


_OLDEST_STARTING = select(func.min(JobRow.start_time)).where(
    JobRow.rm == bindparam("rm"), JobRow.state == JobState.PENDING,
    JobRow.maui_state == MauiJobState.STARTING)


def _due_at(session: Any, rm: str, at: datetime, quick: bool, launched: bool) -> float | None:
    """When the next launch timeout or fence deadline of ``rm`` falls due (POSIX
    seconds), or None: this iteration's launches, and on full iterations the oldest
    unconfirmed launch and the earliest fence deadline."""
    timeout = launch_timeout()
    due = [at.timestamp() + timeout] if launched else []
    if not quick:
        oldest = session.connection().scalar(_OLDEST_STARTING, {"rm": rm})
        if oldest is not None:
            due.append(oldest.timestamp() + timeout)
        deadline = fences.next_deadline(session, rm, at)
        if deadline is not None:
            due.append(deadline.timestamp())
    return min(due, default=None)


def _wake_when_due(app: Any, redis: Any, rm: str, due_at: float | None, now: float) -> None:
    """Send one iteration of ``rm`` for ``due_at`` (once per due second), so a launch
    timeout or fence deadline is acted on then, not a lease watch or poll later."""
    if due_at is None:
        return
    delay = max(0.1, due_at - now + 0.05)
    key = f"{queued_key(rm)}:due:{int(due_at)}"
    try:
        if redis.set(key, 1, nx=True, px=int((delay + 5) * 1000)):
            send_iteration(app, rm, why="due", countdown=delay)
    except Exception as exc:  # broker or Redis away: the lease watch and beat catch up
        log.warning("iteration of %s due in %.1f s not sent: %s", rm, delay, exc)


# Built once (every start runs them): Core statements, no ORM unit of work.
_START_ROWS = select(JobRow.id, JobRow.version, JobRow.request, JobRow.walltime).where(
    JobRow.id.in_(bindparam("ids", expanding=True)))
_STARTING = update(JobRow.__table__).where(
    JobRow.__table__.c.id == bindparam("b_id"),
    JobRow.__table__.c.version == bindparam("b_version")).values(
    maui_state=MauiJobState.STARTING, nodes_allocated=bindparam("nodes"),
    launch_token=bindparam("token"), start_time=bindparam("at"),
    version=bindparam("b_next"))


def _mark_starting(session: Any, rm: str, starts: list[Any],
                   at: datetime) -> list[LaunchRequest]:
    """Commit-to-be each start as Maui ``Starting`` with its allocation and a fresh launch
    token (one read of the rows, one version-guarded UPDATE each); the launches.

    :class:`ConcurrentUpdateError` when another session changes a job between this read
    and its update (the iteration then runs again, deciding anew)."""
    if not starts:
        return []
    conn = session.connection()
    rows = {row.id: row for row in conn.execute(
        _START_ROWS, {"ids": sorted({int(s.job_id) for s in starts})})}
    launches: list[LaunchRequest] = []
    for start in starts:
        row = rows[int(start.job_id)]
        token = uuid.uuid4().hex
        nodes = {k: int(v) for k, v in start.allocation.items()}
        done = conn.execute(_STARTING, {"b_id": row.id, "b_version": row.version,
                                        "b_next": row.version + 1, "nodes": nodes,
                                        "token": token, "at": at}).rowcount
        if done != 1:
            raise ConcurrentUpdateError(f"job {row.id} changed while {rm} decided its start")
        launches += requests_for(row.id, rm, token, row.request or {}, nodes, row.walltime)
    return launches


_contexts: dict[tuple[int, str, int], Any] = {}


def _modules(settings: Settings, rm: str, cfg: Any, session: Any) -> list[Any]:
    """The scheduler modules the RM's maui.cfg lists (MODULES), working inside this
    iteration's session (the job checker's writes commit with the iteration)."""
    if not cfg.modules:
        return []
    key = (os.getpid(), rm, id(cfg))
    ctx = _contexts.get(key)
    if ctx is None or ctx.config is not cfg:  # ids of replaced configs get reused
        ctx = _contexts[key] = ModuleContext.from_settings(settings, rm=rm, config=cfg)
    _, modules = scheduler_parts(cfg, dataclasses.replace(ctx, session=session))
    return modules


def _publish(app: Any, redis: Any, launches: list[LaunchRequest], sessions: Any,
             report: IterationReport, deferral: DeferPolicy | None = None) -> None:
    """Tokens to Redis, then ONE launch message per node carrying every job part this
    iteration started there; a job whose message could not be sent is rolled back."""
    if not launches:
        return
    pipe = redis.pipeline(transaction=False)
    for job_id, token in {(r.job_id, r.token) for r in launches}:
        pipe.set(keys.token_key(job_id), token, ex=PARTS_TTL_S * 24)
    pipe.execute()
    by_node: dict[tuple[str, str], list[LaunchRequest]] = {}
    for req in launches:
        by_node.setdefault((req.rm, req.node), []).append(req)
    failed: set[int] = set()
    for (rm, node), reqs in sorted(by_node.items()):
        reqs = [r for r in reqs if r.job_id not in failed]
        if not reqs:
            continue
        try:
            send_launch_batch(app, rm, node, reqs)
        except Exception as exc:  # broker gone: never leave a Starting job without launch
            log.error("launch of jobs %s on %s/%s not published: %s",
                      sorted({r.job_id for r in reqs}), rm, node, exc)
            failed.update(r.job_id for r in reqs)
    if failed:
        _roll_back(redis, sessions, failed, deferral)
        report.rolled_back = sorted(failed)


def _roll_back(redis: Any, sessions: Any, job_ids: set[int],
               deferral: DeferPolicy | None) -> None:
    for job_id in job_ids:
        redis.delete(keys.token_key(job_id))
    at = datetime.now(timezone.utc)
    with session_scope(sessions) as session:
        for job_id in job_ids:
            row = repository.get_job(session, job_id)
            if row.state is JobState.PENDING and row.maui_state is MauiJobState.STARTING:
                defer(session, row, at, deferral, "launch could not be published")
