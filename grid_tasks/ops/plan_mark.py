"""The state mark of an RM: a fingerprint of everything a plan of it is made from, which
tells whether a kept plan digest is still the plan of the RM's present state (the
freshness rule of :mod:`grid_tasks.ops.plan_cache`).

Every ``showq`` and ``showstart`` reads it, so it must not cost a pass over a deep
queue.  Its parts:

* the jobs of the RM, in two halves.  The idle queue (PENDING, Maui ``Idle``) is the
  RM's idle-queue change counter (:class:`~grid_tasks.db.models.IdleQueueChanges`):
  the database's own triggers add one for every insert, update or delete of a row
  that is or was an idle job of the RM, in the writer's transaction.  Every other job
  row of the RM (running, starting, held, deferred, ended...) is counted, with its
  newest id and the sum of its optimistic-lock versions, through the
  ``(rm, state, maui_state)`` index: few rows (a deep queue is idle jobs).  Together
  they change with any change of a job row: a row crossing between the halves bumps
  the counter; with the counter unchanged, the other half only gains rows by insert
  (its count, and its newest id, grow) or loses them by delete (its count falls),
  and every update of a row bumps that row's version, so the sum grows;
* its reservations (every field), fences (count, newest id, latest deadline) and
  accounting records (count, newest id: fairshare), its nodes (shape, features);
* the RM row (its creation time tells a database made anew under the same URL) and
  its maui.cfg path and modification time; the database URL;
* the nodes the heartbeat registry says are not usable.

Its statements name Core columns (``__table__.c``), not the ORM attributes: compiling
an ORM attribute's statement configures every mapper first, ~0.1 s of a command that
never loads an ORM object.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from sqlalchemy import String, bindparam, cast, func, select
from sqlalchemy.orm import Session

from grid_tasks.db import AccountingRecord, Job as JobRow, Node as NodeRow
from grid_tasks.db.models import Fence, IdleQueueChanges, ResourceManager
from grid_tasks.db.models import Reservation as ReservationRow
from grid_tasks.states import USABLE_STATES, JobState

from .queue_rows import outside_queue

__all__ = ["state_mark"]

_J, _A, _F = JobRow.__table__.c, AccountingRecord.__table__.c, Fence.__table__.c
_R, _N, _M = ReservationRow.__table__.c, NodeRow.__table__.c, ResourceManager.__table__.c
_Q = IdleQueueChanges.__table__.c
_RM = bindparam("rm")

# Built once: the reads every showq/showstart makes to tell a fresh digest.
_CHANGES = select(_Q.changes).where(_Q.rm == _RM)
_OUTSIDE = outside_queue((_J.id, _J.version), _RM, list(JobState)).subquery()
_JOBS = select(func.count(_OUTSIDE.c.id), func.max(_OUTSIDE.c.id), func.sum(_OUTSIDE.c.version))
_ACCT = select(func.count(_A.id), func.max(_A.id)).where(_A.rm == _RM)
_FENCES = select(func.count(_F.id), func.max(_F.id), func.max(_F.deadline)).where(_F.rm == _RM)
_RES = select(_R.id, _R.kind, _R.start_time, _R.end_time, _R.confirmed, cast(_R.acl, String),
              cast(_R.nodes, String), cast(_R.resources, String)).where(
    _R.rm == _RM).order_by(_R.id)
_NODES = select(_N.name, _N.procs, _N.memory_mb, _N.disk_mb, _N.swap_mb,
                cast(_N.features, String)).where(_N.rm == _RM).order_by(_N.name)
_RM_ROW = select(_M.created_at, _M.policy_file).where(_M.name == _RM)


def state_mark(session: Session, rm: str, registry: Any = None) -> str:
    """A fingerprint of everything a plan of ``rm`` is made from (see the module
    docstring): equal marks, equal plans (at the same instant)."""
    conn = session.connection()
    args = {"rm": rm}
    changes = conn.scalar(_CHANGES, args) or 0  # (before the rows, as the loader reads)
    rm_row = conn.execute(_RM_ROW, args).first()
    nodes = [tuple(r) for r in conn.execute(_NODES, args)]
    parts: list[Any] = [
        str(session.get_bind().url), rm, repr(rm_row), _policy_mtime(rm_row), changes,
        list(conn.execute(_JOBS, args).first()), list(conn.execute(_ACCT, args).first()),
        [str(v) for v in conn.execute(_FENCES, args).first()],
        [[str(v) for v in r] for r in conn.execute(_RES, args)], nodes,
        _unusable(registry, rm, [n[0] for n in nodes]),
    ]
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()


def _policy_mtime(rm_row: Any) -> float | None:
    path = None if rm_row is None else rm_row[1]
    try:
        return os.stat(path).st_mtime if path else None
    except OSError:
        return None


def _unusable(registry: Any, rm: str, names: list[str]) -> list[list[str]]:
    """The nodes the registry reports in any state but their usable ones."""
    if registry is None:
        return []
    return sorted([s.node, s.state.value] for s in registry.statuses([(rm, n) for n in names])
                  if s.state not in USABLE_STATES)
