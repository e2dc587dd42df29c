"""Gatekeeper tasks that record what node daemons report: job reports and registrations.

Node daemons hold no database credentials; they send these to their RM's gatekeeper
queue ``gram.<rm>`` (routed by the ``rm`` keyword), signed with a node key, and only
a node may send them (:data:`~grid_tasks.security.roles.TASK_ROLES`).  Both are
acknowledged late and idempotent: a batch redelivered after a gatekeeper died is
recorded again to no effect.  The gatekeeper believes a report only as far as its
own records vouch for it (:mod:`grid_tasks.gram.report_checks`); what it refuses is
logged once and counted (kind ``bad_report``) and changes nothing.
"""

from __future__ import annotations

import functools
import logging
from datetime import datetime, timezone
from typing import Any

from celery import shared_task
from celery.exceptions import Reject

from grid_tasks.celery_app import LAUNCH_CRITICAL
from grid_tasks.db.retry import retrying_one_at_a_time, transient_db_error
from grid_tasks.effects import RECORD_NODE, RECORD_REPORTS, trigger_iteration
from grid_tasks.errors import GridTasksError
from grid_tasks.gram.node_record import record_when_ready
from grid_tasks.gram.report import redis_retrying, settle_parts
from grid_tasks.gram.report_checks import REFUSED, queue_refusal, signer_refusal, vet_report
from grid_tasks.gram.report_sender import FINISHED, Report, from_wire
from grid_tasks.gram.report_writer import record
from grid_tasks.security.refusals import refuse
from grid_tasks.services import services_for
from grid_tasks.topology_cache import current_topology

log = logging.getLogger(__name__)


@shared_task(name=RECORD_REPORTS, bind=True, ignore_result=True, **LAUNCH_CRITICAL)
def record_reports(self: Any, *, rm: str, node: str,
                   reports: list[dict[str, Any]]) -> dict[str, int]:
    """Check and record one node's batch of job reports in one transaction, then send
    their events and iteration triggers.  A database away longer than the retries in
    place (:func:`~grid_tasks.db.retry.retrying_one_at_a_time`: a few seconds, one
    thread at a time) puts the
    message back on the queue, again and again, for as long as the outage lasts (it
    is the gatekeeper's to ride out, not the node's); acknowledged late, so a
    gatekeeper that dies meanwhile loses nothing either.  Once a batch is decided
    (recorded, or refused) its launches' parts in Redis expire
    (:func:`~grid_tasks.gram.report.settle_parts`): until then they are the record of
    the ends, which the RM's iteration also writes should this message be lost
    (:mod:`grid_tasks.scheduling.reconcile`)."""
    refused = functools.partial(_refuse, self)
    whole = signer_refusal(self.signer_subject(), node) or queue_refusal(rm, _queue(self))
    if whole is not None:
        refused(whole)
        return {"recorded": 0, "refused": len(reports)}
    reports = reports if isinstance(reports, list) else []
    batch = _decoded(reports, refused)
    services = services_for(self.app)
    try:
        done = record(services.sessions, batch, retrying_one_at_a_time,
                      functools.partial(vet_report, rm, node))
    except Exception as exc:
        if not transient_db_error(exc):
            raise
        log.warning("reports of %s/%s wait for the database: %s", rm, node, exc)
        raise Reject(f"database unavailable: {type(exc).__name__}", requeue=True) from None
    try:
        redis_retrying(lambda: settle_parts(services.redis, [r.req for r in batch
                                                             if r.kind == FINISHED]))
    except Exception as exc:  # they expire at the node's long TTL instead
        log.warning("parts of %s/%s recorded but not expired: %s", rm, node, exc)
    for _, reason in done.refused:
        refused(reason)
    for report, error in done.failed:
        log.error("report on job %s from %s/%s not recorded: %s", report.req.job_id, rm,
                  node, error)
    try:
        redis_retrying(lambda: done.outbox.flush(services.redis, self.app))
    except Exception as exc:  # committed; beat's iterations catch up on the triggers
        log.warning("reports of %s/%s recorded, but their events or triggers were not "
                    "sent: %s", rm, node, exc)
    bad = len(done.refused) + len(done.failed)
    return {"recorded": len(batch) - bad, "refused": bad + len(reports) - len(batch)}


@shared_task(name=RECORD_NODE, bind=True, ignore_result=True, **LAUNCH_CRITICAL)
def record_node(self: Any, *, rm: str, node: str, resources: dict[str, Any],
                at: float | None = None) -> bool:
    """Record a node daemon's registration (``registered_at``, ``last_seen``, its
    resources), waiting while the database is not prepared yet; then the RM's
    iteration runs, seeing the node.  Only a node of this RM's topology may register."""
    services = services_for(self.app)
    settings = services.settings
    reason = signer_refusal(self.signer_subject(), node) or queue_refusal(rm, _queue(self))
    if reason is None:
        try:
            current_topology(settings.topology_file).node(rm, node)
        except GridTasksError as exc:
            reason = f"{REFUSED}: registration of {rm}/{node}: {exc}"
    if reason is not None:
        _refuse(self, reason)
        return False
    now = services.clock.now()
    when = now if at is None else min(now, datetime.fromtimestamp(float(at), timezone.utc))
    record_when_ready(services.sessions, rm, node, dict(resources), when=when)
    trigger_iteration(self.app, rm, client=services.redis)
    return True


def _queue(task: Any) -> str | None:
    """The queue the current message came from (None when run directly)."""
    return (task.request.delivery_info or {}).get("routing_key") or None


def _refuse(task: Any, reason: str) -> None:
    refuse(task.app, queue=_queue(task), signer=task.signer_subject(), reason=reason,
           task=task.name)


def _decoded(reports: list[Any], refused: Any) -> list[Report]:
    """The well-formed reports of a message; each malformed one is refused."""
    out = []
    for data in reports:
        try:
            out.append(from_wire(data))
        except GridTasksError as exc:
            refused(f"{REFUSED}: {exc}")
    return out
