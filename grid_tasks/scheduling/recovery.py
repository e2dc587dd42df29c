"""Launches that never confirmed, and jobs whose job manager's lease expired.

Node failure policy (what happens to the jobs of a node that went silent):

* ``FAIL`` (default): the job is FAILED, reason "node X lost", GRAM error JM_STOPPED;
* ``REQUEUE``: the job goes back to PENDING and is scheduled anew once its fence
  deadline has passed.

Set it per RM in the RM's maui.cfg as ``JOBACTIONONNODEFAILURE FAIL|REQUEUE``
(Moab's parameter name, in the maui.cfg schema with the values FAIL and
REQUEUE), or grid-wide with ``GRID_TASKS_NODE_FAILURE_POLICY``, which wins.

Either way the launch is fenced first (:mod:`grid_tasks.scheduling.fences`): its
token is superseded by a tombstone, so every part still running kills itself (a part
that cannot read it does so at its renewal bound), and its nodes stay held until the
fence deadline - the first sight of the loss plus the fence span
(:func:`grid_tasks.leases.fence_span`: 18 s with the shipped settings).

A launch not confirmed within ``GRID_TASKS_LAUNCH_TIMEOUT`` seconds (default 30) is
fenced too, and goes back to Idle at its fence deadline without a deferral (a node
that died is not the job's fault) - or FAILED if it was cancelled.  A launch task
redelivered after the timeout (the visibility timeout, 30 s, plus the restore scan,
5 s: never before the launch timeout) finds the tombstone and starts nothing.  So a
killed daemon's in-flight jobs start again within launch timeout + fence span + the
slack of two iterations: 54 s, at most 60 s with the shipped settings
(:func:`redelivery_bound`).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from enum import Enum
from pathlib import Path
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from grid_tasks.db.models import Job as JobRow
from grid_tasks.errors import ConfigError
from grid_tasks.gram import keys
from grid_tasks.gram.records import Outbox, finish, transition
from grid_tasks.leases import fence_span
from grid_tasks.schedmods.jobchecker import defer_job
from grid_tasks.scheduling.fences import fence
from grid_tasks.scheduling.job_rows import holding_nodes
from grid_tasks.scheduling.state import maui_config
from grid_tasks.settings import Settings
from grid_tasks.states import JobState, MauiJobState

ENV_POLICY = "GRID_TASKS_NODE_FAILURE_POLICY"
ENV_LAUNCH_TIMEOUT = "GRID_TASKS_LAUNCH_TIMEOUT"
#: The fence span of the shipped settings (seconds), for callers that pass none.
DEFAULT_FENCE_S = fence_span(Settings())


class NodeFailurePolicy(str, Enum):
    """What a lost node does to its jobs."""

    FAIL = "FAIL"
    REQUEUE = "REQUEUE"


def node_failure_policy(policy_file: str | None, environ: Any = None) -> NodeFailurePolicy:
    """The policy for an RM: environment first, then its maui.cfg, else FAIL."""
    env = os.environ if environ is None else environ
    raw = env.get(ENV_POLICY)
    if not raw and policy_file and Path(policy_file).is_file():
        # the parsed maui.cfg the iteration reads anyway (cached per version of the file)
        cfg = maui_config(policy_file)
        if cfg.is_set("JOBACTIONONNODEFAILURE"):  # parsing checked it is FAIL or REQUEUE
            return NodeFailurePolicy(cfg.get("JOBACTIONONNODEFAILURE"))
    if not raw:
        return NodeFailurePolicy.FAIL
    try:
        return NodeFailurePolicy(raw.strip().upper())
    except ValueError:
        raise ConfigError(f"{ENV_POLICY}={raw!r}: expected FAIL or REQUEUE",
                          key=ENV_POLICY) from None


#: Seconds an iteration sent for a due moment (see the iteration's ``_wake_when_due``)
#: may take to be delivered and run on a busy scheduler.
ITERATION_SLACK_S = 3.0


def redelivery_bound(settings: Settings, timeout: float) -> float:
    """Seconds within which a job whose launch was lost with its node daemon starts
    again (on a usable node): the launch timeout (an iteration is sent for that
    moment), the fence span (another one is sent for the deadline, which starts the
    job), and the slack of those two iterations.  README states it for the shipped
    settings: 30 + 18 + 6 = 54 s, at most 60 s."""
    return timeout + fence_span(settings) + 2 * ITERATION_SLACK_S


def launch_timeout(environ: Any = None) -> float:
    env = os.environ if environ is None else environ
    raw = env.get(ENV_LAUNCH_TIMEOUT) or "30"
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ConfigError(f"{ENV_LAUNCH_TIMEOUT}={raw!r}: expected positive seconds",
                          key=ENV_LAUNCH_TIMEOUT)
    return value


def back_to_idle(row: JobRow) -> None:
    """Forget an allocation: the job waits in the idle queue again."""
    row.maui_state = MauiJobState.IDLE
    row.nodes_allocated = {}
    row.launch_token = None


def _node_probe(redis: Any, rows: list[JobRow]) -> dict[tuple[int, str], tuple[bool, bool]]:
    """(lease alive, part reported) per (job, node) of the given jobs, in one round trip."""
    pairs = [(row, node) for row in rows for node in sorted(row.nodes_allocated or {})]
    pipe = redis.pipeline(transaction=False)
    for row, node in pairs:
        pipe.exists(keys.lease_key(row.id, node))
        pipe.hexists(keys.parts_key(row.id, row.launch_token or "-"), node)
    raw = pipe.execute() if pairs else []
    return {(row.id, node): (bool(raw[2 * i]), bool(raw[2 * i + 1]))
            for i, (row, node) in enumerate(pairs)}


def defer(session: Session, row: JobRow, now: datetime, policy: Any, reason: str) -> None:
    """A start that failed: the job forgets its allocation and is deferred for Maui's
    DEFERTIME (held past DEFERCOUNT deferrals); without a policy it is Idle at once."""
    back_to_idle(row)
    if policy is not None:
        defer_job(session, row, now.timestamp(), policy, reason)


# Built once (every iteration runs it): the cache key of a statement object is memoized.
_DUE = select(JobRow).where(
    holding_nodes(bindparam("rm")), JobRow.start_time <= bindparam("cutoff"))


def recover(session: Session, rm: str, now: datetime, redis: Any, outbox: Outbox,
            policy: NodeFailurePolicy, timeout: float,
            fence_s: float = DEFAULT_FENCE_S) -> list[int]:
    """Fence unconfirmed launches and lost job managers; returns the job ids.

    ``fence_s``: the fence span (:func:`grid_tasks.leases.fence_span` of the grid's
    settings): how long a fenced launch's nodes stay held, and a requeued job waits."""
    # only jobs started at least ``timeout`` ago can be due (every iteration asks)
    rows = list(session.scalars(_DUE, {"rm": rm,
                                       "cutoff": now - timedelta(seconds=timeout)}))
    if not rows:
        return []
    probe = _node_probe(redis, rows)
    touched = []
    for row in rows:
        age = (now - row.start_time).total_seconds() if row.start_time else 0.0
        if age < timeout:
            continue
        if row.state is JobState.PENDING:
            # unconfirmed past the timeout even if its job managers live (their ACTIVE
            # report may have been lost to a database outage): fenced, any part still
            # running is dead before the job may run again
            touched.append(row.id)
            _unconfirmed(session, row, now, redis, outbox, fence_s)
            continue
        lost = [n for n in sorted(row.nodes_allocated or {}) if probe[(row.id, n)] == (False, False)]
        if lost and not _redis_restarted_within(redis, timeout):
            touched.append(row.id)
            _lost(session, row, lost, now, redis, outbox, policy, fence_s)
    return touched


def _redis_restarted_within(redis: Any, grace: float) -> bool:
    """Whether the Redis server started less than ``grace`` seconds ago: its restart
    wiped every lease, and live job managers re-create theirs within a lease interval,
    so a missing lease is no evidence of a lost node yet."""
    try:
        uptime = float(redis.info("server").get("uptime_in_seconds", grace))
    except (AttributeError, TypeError, ValueError):
        return False  # a client without INFO: leases are taken at their word
    return uptime < grace


def _unconfirmed(session: Session, row: JobRow, now: datetime, redis: Any,
                 outbox: Outbox, fence_s: float) -> None:
    nodes = ", ".join(sorted(row.nodes_allocated or {})) or "its nodes"
    why = f"launch on {nodes} not confirmed"
    cancelled = bool(redis.exists(keys.cancel_key(row.id)))
    fence(session, row, redis, now, fence_s, why, requeue=not cancelled)
    if cancelled:
        finish(session, row, JobState.FAILED, "cancelled by user", now, outbox,
               gram_error="USER_CANCELLED")
        return
    outbox.rms.add(row.rm or "")


def _lost(session: Session, row: JobRow, lost: list[str], now: datetime, redis: Any,
          outbox: Outbox, policy: NodeFailurePolicy, fence_s: float) -> None:
    why = f"node {', '.join(lost)} lost (job manager lease expired)"
    requeue = policy is NodeFailurePolicy.REQUEUE and not redis.exists(keys.cancel_key(row.id))
    if requeue:  # PENDING first (that makes it Idle), then on the fence hold
        transition(session, row, JobState.PENDING, f"{why}: requeued", now, outbox)
        fence(session, row, redis, now, fence_s, why, requeue=True)
        outbox.rms.add(row.rm or "")
        return
    fence(session, row, redis, now, fence_s, why, requeue=False)
    finish(session, row, JobState.FAILED, why, now, outbox, gram_error="JM_STOPPED")
