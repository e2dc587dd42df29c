"""The node daemon's GRAM tasks: launches from the scheduler.

Node daemons import only this and :mod:`grid_tasks.node.tasks` (see
:func:`grid_tasks.celery_app.task_modules`): they hold no database credentials and
never load SQLAlchemy.  The gatekeeper's tasks are in :mod:`grid_tasks.gram.gatekeeper`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from celery import shared_task

from grid_tasks.celery_app import LAUNCH_CRITICAL
from grid_tasks.effects import LAUNCH, LAUNCH_BATCH
from grid_tasks.gram import keys
from grid_tasks.gram.jobmanager import JobManager, Part
from grid_tasks.gram.launch import LaunchRequest
from grid_tasks.gram.report import PARTS_TTL_S, node_context, report_finished
from grid_tasks.gram.standin import stand_in
from grid_tasks.node.harness import JobsMode, jobs_mode

log = logging.getLogger(__name__)

# KEYS: token, cancel, launched.  ARGV: token, ttl.  Returns 1 to launch, 0 if
# stale (superseded, fenced by recovery, or no token at all) or already launched, -1
# if the job was cancelled meanwhile.
_CLAIM = """
local current = redis.call('GET', KEYS[1])
if (not current) or current ~= ARGV[1] then return 0 end
if redis.call('EXISTS', KEYS[2]) == 1 then return -1 end
if not redis.call('SET', KEYS[3], 1, 'NX', 'EX', tonumber(ARGV[2])) then return 0 end
return 1
"""


@shared_task(name=LAUNCH, bind=True, ignore_result=True, **LAUNCH_CRITICAL)
def launch(self: Any, *, rm: str, node: str, request: dict[str, Any],
           on_node: bool = True) -> str:
    """Start the job manager of one job's part on this node (idempotent).

    Keyed by job id + launch token + node in Redis: a redelivered or duplicate
    launch, or one whose token was superseded (rolled back, requeued), starts
    nothing.  Returns what happened, for logs and tests.
    """
    return _launch_all(self.app, [LaunchRequest.from_dict(request)], self.request.hostname)[0]


@shared_task(name=LAUNCH_BATCH, bind=True, ignore_result=True, **LAUNCH_CRITICAL)
def launch_batch(self: Any, *, rm: str, node: str, requests: list[dict[str, Any]],
                 on_node: bool = True) -> list[str]:
    """Start the job managers of every job part one iteration started on this node.

    Each part is claimed exactly as by :func:`launch` (job id + token + node), so a
    redelivered batch starts only the parts not yet started.  Returns what happened
    to each part, in order.
    """
    return _launch_all(self.app, [LaunchRequest.from_dict(r) for r in requests],
                       self.request.hostname)


def _launch_all(app: Any, reqs: list[Any], hostname: str | None = None) -> list[str]:
    """Claim every part in one Redis round trip, then start the claimed ones (shown in
    Flower as tasks of worker ``hostname`` while they run: :mod:`grid_tasks.gram.monitor`)."""
    ctx = node_context(app)
    claimed_at = time.monotonic()  # the processes' renewal bound counts from here
    pipe = ctx.redis.pipeline(transaction=False)
    for req in reqs:  # EVAL: a registered script would make the pipeline ask SCRIPT EXISTS
        pipe.eval(_CLAIM, 3, keys.token_key(req.job_id), keys.cancel_key(req.job_id),
                  keys.launched_key(req.job_id, req.token, req.node), req.token, PARTS_TTL_S)
    outcomes = []
    standin = jobs_mode(app) is JobsMode.STANDIN  # a scale harness that asked for it
    for req, verdict in zip(reqs, pipe.execute()):
        if verdict == 0:
            outcomes.append("skipped")
        elif verdict == -1:
            report_finished(ctx, req, Part({}, "cancelled by user", "USER_CANCELLED").to_json())
            outcomes.append("cancelled")
        elif standin:
            stand_in(ctx, req)
            outcomes.append("stood in")
        else:
            JobManager(req, ctx, claimed_at, shown_by=hostname).launch()
            outcomes.append("launched")
    return outcomes
