"""What a gatekeeper checks before it records a node's report (pure: no I/O).

Node daemons hold no database credentials: they send their job managers' reports
and their registration to their RM's gatekeeper, which records them.  A node is
then the least trusted writer of job state there is (it runs users' programs, as
root when it may), so a report is believed only as far as the gatekeeper's own
records vouch for it:

* the job is one of this gatekeeper's RM (and the message came in on its queue);
* the reporting node is one the job was launched on (``nodes_allocated``) and the
  report carries the job's *current* launch token: a node can speak only of the
  launches it was handed, never of another job, nor of an older launch of this one;
* when the signer's certificate names a node (``CN=<node>``), that node is the
  one reporting.  The embedded stack's single node key (``CN=node``) names no node:
  the two checks above then stand alone.

Every refusal reason starts with :data:`REFUSED`, which
:mod:`grid_tasks.security.refusals` counts as kind ``bad_report``.
"""

from __future__ import annotations

from typing import Any

from grid_tasks.queues import gatekeeper_queue

#: How every refusal of a report starts (its kind in the refusal counts).
REFUSED = "bad report"
#: The common name of a node key shared by every node (it names none of them).
SHARED_NODE_CN = "node"


def common_name(subject: str | None) -> str | None:
    """The ``CN=`` part of a slash-form subject (``/O=grid_tasks/OU=node/CN=node1``)."""
    for part in (subject or "").split("/"):
        if part.startswith("CN="):
            return part[3:]
    return None


def named_node(subject: str | None) -> str | None:
    """The node a signer's certificate names, or None (unsigned, or the shared key)."""
    name = common_name(subject)
    return None if name in (None, "", SHARED_NODE_CN) else name


def signer_refusal(subject: str | None, node: str) -> str | None:
    """Why a message signed by ``subject`` may not speak for ``node`` (None: it may)."""
    named = named_node(subject)
    if named is not None and named != node:
        return f"{REFUSED}: signed by node {named!r}, but speaks for node {node!r}"
    return None


def queue_refusal(rm: str, queue: str | None) -> str | None:
    """Why a report for ``rm`` may not be taken from ``queue`` (None when it may)."""
    if queue and queue != gatekeeper_queue(rm):
        return f"{REFUSED}: for {rm}, but delivered on queue {queue}"
    return None


def report_refusal(rm: str, node: str, job: int, token: str, results: dict[str, Any],
                   row: Any) -> str | None:
    """Why a report by ``node`` on launch ``token`` of job ``job`` must not be recorded
    against ``row`` (the job as stored, None if unknown); None when it may."""
    where = f"on job {job} from {node}"
    if row is None:
        return f"{REFUSED} {where}: no such job"
    if row.rm != rm:
        return f"{REFUSED} {where}: the job belongs to {row.rm}, not {rm}"
    allocated = set(row.nodes_allocated or ())
    if node not in allocated:
        return f"{REFUSED} {where}: the job was not launched on {node}"
    if not row.launch_token or token != row.launch_token:
        return f"{REFUSED} {where}: not the job's current launch (stale or forged token)"
    strangers = sorted(set(results) - allocated)
    if strangers:
        return f"{REFUSED} {where}: parts of nodes the job was not launched on: " + \
            ", ".join(strangers)
    return None


def vet_report(rm: str, node: str, report: Any, row: Any) -> str | None:
    """Why ``report``, in a message from ``node`` to ``rm``'s gatekeeper, must not be
    recorded against ``row`` (its job as stored, None if unknown); None when it may."""
    req = report.req
    if req.node != node or req.rm != rm:
        return (f"{REFUSED} on job {req.job_id}: sent by {node} to {rm}, but speaks "
                f"for {req.node} of {req.rm}")
    return report_refusal(rm, node, req.job_id, req.token, report.results, row)
