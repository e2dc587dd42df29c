"""Redis keys of the GRAM layer (all may be lost: SQL stays the record)."""

from __future__ import annotations

_P = "grid_tasks:gram"
#: How long a cancel request is remembered (seconds).
CANCEL_TTL_S = 24 * 3600


#: How a fenced launch epoch reads in :func:`token_key` (a tombstone, see :func:`fenced`).
FENCED_PREFIX = "fenced:"
#: How long a launch token (or its tombstone) stays in Redis (seconds).
TOKEN_TTL_S = 24 * 3600


def token_key(job_id: int) -> str:
    """The launch epoch currently valid for the job: its launch token, or the tombstone
    of a fenced one.  Only the current token may start (launch claim) or keep running
    (job manager); absent means a restarted, empty Redis, where a running job manager
    re-asserts its own token (nothing may start on an absent one)."""
    return f"{_P}:{job_id}:token"


def fenced(token: str | None) -> str:
    """The tombstone recovery writes over a lost or unconfirmed launch's token: every
    job manager of that launch reads it as superseded and kills its processes."""
    return f"{FENCED_PREFIX}{token or '-'}"


def launched_key(job_id: int, token: str, node: str) -> str:
    """Set once when a node accepted a launch: a redelivered launch starts nothing."""
    return f"{_P}:{job_id}:{token}:{node}:launched"


def lease_key(job_id: int, node: str) -> str:
    """Refreshed by a running job manager; its expiry means the manager is gone."""
    return f"{_P}:{job_id}:{node}:lease"


def cancel_key(job_id: int) -> str:
    """Set by a cancel; job managers kill their processes when they see it."""
    return f"{_P}:{job_id}:cancel"


def parts_key(job_id: int, token: str) -> str:
    """Hash node -> JSON result of that node's part of one launch."""
    return f"{_P}:{job_id}:{token}:parts"


def started_key(job_id: int, token: str) -> str:
    """Set by the first node whose processes started (it records ACTIVE)."""
    return f"{_P}:{job_id}:{token}:started"


def pending_cancels_key(rm: str) -> str:
    """Hash job id -> verified requester ("" when no ownership check is due) of the
    cancels ``rm``'s gatekeeper accepted while the database was away; the iteration
    applies them to SQL once it is back (:mod:`grid_tasks.scheduling.reconcile`)."""
    return f"{_P}:{rm}:cancels-pending"
