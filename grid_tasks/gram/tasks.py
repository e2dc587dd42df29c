"""Celery tasks of the GRAM layer, run by node daemons."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task

from grid_tasks.celery_app import LAUNCH_CRITICAL
from grid_tasks.gram.door import CANCEL, SUBMIT, answer

log = logging.getLogger(__name__)

LAUNCH = "grid_tasks.gram.tasks.launch"
#: Every part one iteration starts on one node, in one message (the iteration sends these).
LAUNCH_BATCH = "grid_tasks.gram.tasks.launch_batch"

# KEYS: token, cancel, launched.  ARGV: token, ttl.  Returns 1 to launch, 0 if
# stale or already launched, -1 if the job was cancelled meanwhile.
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
    from grid_tasks.gram.launch import LaunchRequest

    return _launch_all(self.app, [LaunchRequest.from_dict(request)])[0]


@shared_task(name=LAUNCH_BATCH, bind=True, ignore_result=True, **LAUNCH_CRITICAL)
def launch_batch(self: Any, *, rm: str, node: str, requests: list[dict[str, Any]],
                 on_node: bool = True) -> list[str]:
    """Start the job managers of every job part one iteration started on this node.

    Each part is claimed exactly as by :func:`launch` (job id + token + node), so a
    redelivered batch starts only the parts not yet started.  Returns what happened
    to each part, in order.
    """
    from grid_tasks.gram.launch import LaunchRequest

    return _launch_all(self.app, [LaunchRequest.from_dict(r) for r in requests])


@shared_task(name=SUBMIT, bind=True, track_started=False)
def submit(self: Any, *, rm: str, rsl: str, creds: dict[str, Any],
           idempotency_key: str | None = None, extra_env: dict[str, str] | None = None,
           variables: dict[str, str] | None = None, source: str = "<rsl>") -> dict[str, Any]:
    """The gatekeeper's side of a GRAM submission: the verified submitter is mapped
    through this gatekeeper's grid map and the job recorded; ``{"ok": {id, contact}}``
    or the refusal as data (:mod:`grid_tasks.gram.door`).

    A stored job's RM iterates right here (the quick pass, under the RM's lock, as a
    DUROC header does), not in a scheduler worker the trigger would travel to: the
    job's start waits for no other task, and the answer goes back once it is placed."""
    # (imported here: node daemons import this module and must not load SQLAlchemy)
    from grid_tasks.gram.records import Outbox
    from grid_tasks.gram.submission import store_submission
    from grid_tasks.rsl import lower
    from grid_tasks.scheduling.tasks import iterate_here
    from grid_tasks.services import grid_for

    grid = grid_for(self.app)
    who = self.submitter()
    held = Outbox()

    def store() -> dict[str, Any]:
        (sub,) = lower(rsl, variables, source=source,
                       max_substitution=grid.settings.rsl_max_substitution)
        job_id, contact, stored = store_submission(
            grid, rsl, sub, rm, _known_creds(creds), idempotency_key=idempotency_key,
            extra_env=extra_env, identity=who, hold=held)
        if stored:  # its events go with the iteration lock's round trip
            try:
                iterate_here(self.app, rm, events=held.events, quick=True)
            except Exception as exc:  # the job is stored: beat's iteration will place it
                log.warning("job %s stored on %s but not scheduled in place: %s",
                            job_id, rm, exc)
        return {"id": job_id, "contact": contact}

    return answer(store)


@shared_task(name=CANCEL, bind=True, track_started=False)
def cancel(self: Any, *, rm: str, job: int) -> dict[str, Any]:
    """The gatekeeper's side of a cancel: only the job's owner (as verified) may, when a
    grid map says who is who, or an operator (Maui's admin canceljob); the job's status,
    or the refusal, as data."""
    from grid_tasks.gram.submission import cancel_job
    from grid_tasks.security.roles import Role
    from grid_tasks.services import grid_for

    grid = grid_for(self.app)
    who, admin = self.submitter(), self.signed_as(Role.OPERATOR)
    return answer(lambda: cancel_job(grid, int(job), rm=rm, identity=who,
                                     admin=admin).to_dict())


def _known_creds(creds: dict[str, Any]) -> dict[str, Any]:
    """The credential fields a submission may carry (anything else is dropped)."""
    return {k: creds.get(k) for k in ("user", "group", "account", "qos", "job_class")}


def _launch_all(app: Any, reqs: list[Any]) -> list[str]:
    """Claim every part in one Redis round trip, then start the claimed ones."""
    from grid_tasks.gram import keys
    from grid_tasks.gram.jobmanager import JobManager, Part
    from grid_tasks.gram.report import PARTS_TTL_S, node_context, report_finished

    ctx = node_context(app)
    pipe = ctx.redis.pipeline(transaction=False)
    for req in reqs:  # EVAL: a registered script would make the pipeline ask SCRIPT EXISTS
        pipe.eval(_CLAIM, 3, keys.token_key(req.job_id), keys.cancel_key(req.job_id),
                  keys.launched_key(req.job_id, req.token, req.node), req.token, PARTS_TTL_S)
    outcomes = []
    for req, verdict in zip(reqs, pipe.execute()):
        if verdict == 0:
            outcomes.append("skipped")
        elif verdict == -1:
            report_finished(ctx, req, Part({}, "cancelled by user", "USER_CANCELLED").to_json())
            outcomes.append("cancelled")
        else:
            JobManager(req, ctx).launch()
            outcomes.append("launched")
    return outcomes


def launch_options(req: Any) -> dict[str, Any]:
    """``apply_async`` options of a readable launch of ``req`` (a LaunchRequest)."""
    from grid_tasks.celery_app import readable

    return {"kwargs": {"rm": req.rm, "node": req.node, "on_node": True,
                       "request": req.to_dict()}, "ignore_result": True,
            **readable("launch", job=req.job_id, rm=req.rm, node=req.node,
                       tasks=req.tasks)}


def batch_options(rm: str, node: str, reqs: list[Any]) -> dict[str, Any]:
    """``apply_async`` options of one node's launch batch (LaunchRequests of ``node``)."""
    from grid_tasks.celery_app import readable

    jobs = ",".join(str(r.job_id) for r in reqs)
    return {"kwargs": {"rm": rm, "node": node, "on_node": True,
                       "requests": [r.to_dict() for r in reqs]}, "ignore_result": True,
            **readable("launch", job=jobs, rm=rm, node=node,
                       tasks=sum(r.tasks for r in reqs))}
