"""``diagnose -r [RES]``: every stored reservation and what looks wrong with it.

For each SQL reservation (admin, job, grid): kind, RM, time window, nodes and
processors, ACL, the job it is bound to, and for grid reservations the state of the
broker's token in the token store (``restored``: mirrored back from SQL after a Redis
loss) and whether the broker marked it enacted (tokens confirmed).  Problems: expired
but still stored, bound to a job that already ended, a grid reservation whose token is
gone (half-made when not enacted: its broker died before confirming), overlapping another
reservation on the same nodes, and overcommitting a node (more processors reserved
at one instant than the node has).  Running jobs inside reservations are checked by
``diagnose -n`` (dedicated processors), not here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from grid_tasks.db import Job, Reservation, ReservationKind, repository
from grid_tasks.errors import NotFoundError
from grid_tasks.legion.collection import enacted
from grid_tasks.scheduling.grid_reservations import mirror_ids
from grid_tasks.states import JobState

from .common import check_rm, epoch
from .reservations import ResRow, _sql_row
from .timefmt import iso
from .why import Reason

#: token_id -> the token (None: not in the store); raises when the store is unreachable
TokenLookup = Callable[[str], Any]


@dataclass
class ResDiagnosis:
    """One reservation as diagnose -r shows it."""

    row: ResRow
    confirmed: bool
    token: str | None
    # held, confirmed, restored (mirrored from SQL), expired, missing, unknown; None: not grid
    token_state: str | None
    job_state: str | None
    problems: list[Reason] = field(default_factory=list)
    enacted: bool | None = None  # grid only: its broker confirmed the tokens

    def to_dict(self, now: datetime) -> dict[str, Any]:
        data = self.row.to_dict(now)
        data.update({"confirmed": self.confirmed, "token": self.token,
                     "token_state": self.token_state, "enacted": self.enacted,
                     "job_state": self.job_state,
                     "problems": [p.to_dict() for p in self.problems]})
        return data


def diagnose_reservations(session: Session, now: datetime, *, name: str | None = None,
                          rm: str | None = None,
                          tokens: TokenLookup | None = None) -> list[ResDiagnosis]:
    """``diagnose -r``: the reservation ``name`` or every stored one (of ``rm``).

    ``tokens`` looks grid reservations' tokens up in the token store; without it
    (Redis unreachable) their token state is ``unknown`` and not judged.
    """
    check_rm(session, rm)
    stmt = select(Reservation).order_by(Reservation.start_time, Reservation.id)
    if rm is not None:
        stmt = stmt.where(Reservation.rm == rm)
    stored = list(session.scalars(stmt))
    procs = {(n.rm, n.name): n.procs for n in repository.list_nodes(session, rm)}
    jobs = _job_states(session, [r.owner_job_id for r in stored if r.owner_job_id])
    out = []
    for res in stored:
        row = _sql_row(res, lambda n, r=res: procs.get((r.rm, n), 0))
        diag = ResDiagnosis(row, res.confirmed, res.token, None,
                            jobs.get(res.owner_job_id) if res.owner_job_id else None)
        if res.kind is ReservationKind.GRID:
            diag.enacted = enacted(res)
            diag.token_state = _token_state(res, tokens, now)
        _own_problems(diag, res, now)
        out.append(diag)
    _cross_problems(out, procs)
    if name is not None:
        out = [d for d in out if d.row.name == name]
        if not out:
            known = ", ".join(sorted({r.name for r in stored}))
            raise NotFoundError(f"unknown reservation {name!r} (known: {known or 'none'})")
    return out


def _job_states(session: Session, ids: list[int]) -> dict[int, str]:
    if not ids:
        return {}
    rows = session.execute(select(Job.id, Job.state).where(Job.id.in_(ids)))
    return {i: JobState(s).value for i, s in rows}


def _token_state(res: Reservation, tokens: TokenLookup | None, now: datetime) -> str:
    if not res.token:
        return "missing"
    if tokens is None:
        return "unknown"
    try:
        token = tokens(res.token)
    except Exception:  # noqa: BLE001 - the store went away mid-report: say so, go on
        return "unknown"
    if token is None:
        return _mirror_state(res, tokens)
    if token.confirmed:
        return "confirmed"
    return "held" if token.expires_ms > epoch(now) * 1000 else "expired"


def _own_problems(d: ResDiagnosis, res: Reservation, now: datetime) -> None:
    if d.row.end is not None and d.row.end <= now:
        d.problems.append(Reason("expired", f"ended at {iso(d.row.end)} but still stored "
                                 "(releaseres it, or the job checker purges it)"))
    if d.job_state is not None and JobState(d.job_state).terminal:
        d.problems.append(Reason("job", f"bound job {res.owner_job_id} is {d.job_state}: "
                                 "the reservation should have been released with it"))
    if res.owner_job_id and d.job_state is None:
        d.problems.append(Reason("job", f"bound job {res.owner_job_id} does not exist "
                                 "(purged?)"))
    if d.token_state in ("missing", "expired") and not res.confirmed:
        d.problems.append(Reason("token", f"grid reservation not confirmed and its token is "
                                 f"{d.token_state}: a leaked reservation"))
    elif d.token_state in ("missing", "expired") and d.enacted is False:
        d.problems.append(Reason("token", f"half-made grid reservation: its token is "
                                 f"{d.token_state} and its broker never marked it enacted "
                                 "(died before confirming); the RM prunes it"))
    elif d.token_state in ("missing", "expired") and d.enacted:
        d.problems.append(Reason("token", f"enacted grid reservation whose token is "
                                 f"{d.token_state} (released?): the RM prunes it"))


def _mirror_state(res: Reservation, tokens: TokenLookup) -> str:
    """``restored`` when the token store mirrors ``res`` from SQL (after a Redis loss,
    enacted rows only), else ``missing``."""
    ids = mirror_ids(res)
    try:
        mirrored = tokens(ids[0]) if ids and enacted(res) else None
    except Exception:  # noqa: BLE001 - the store went away mid-report
        return "unknown"
    return "restored" if mirrored is not None and mirrored.confirmed else "missing"


def _cross_problems(diags: list[ResDiagnosis], capacity: dict[tuple[str, str], int]) -> None:
    """Overlaps between reservations and node overcommits (sweep over start times)."""
    by_node: dict[tuple[str, str], list[ResDiagnosis]] = defaultdict(list)
    for d in diags:
        for node, procs in d.row.procs_by_node.items():
            if procs > 0:
                by_node[(str(d.row.rm), node)].append(d)
    shared: dict[tuple[int, int], list[str]] = defaultdict(list)  # pair -> nodes
    for (rm, node), group in by_node.items():
        for i, a in enumerate(group):
            for b in group[i + 1:]:
                if _overlap(a.row, b.row):
                    shared[(diags.index(a), diags.index(b))].append(node)
        limit = capacity.get((rm, node), 0)
        for d in group:
            at = d.row.start
            active = [x for x in group if x.row.start <= at and _ends_after(x.row, at)]
            held = sum(x.row.procs_by_node.get(node, 0) for x in active)
            if held > limit:
                others = ", ".join(x.row.name for x in active if x is not d) or "none"
                d.problems.append(Reason("overcommit", f"node {node}: {held} processors "
                                         f"reserved at {iso(at)}, {limit} configured "
                                         f"(with {others})"))
    for (i, j), nodes in shared.items():
        a, b = diags[i], diags[j]
        since = iso(max(a.row.start, b.row.start))
        for x, y in ((a, b), (b, a)):
            x.problems.append(Reason("overlap", f"overlaps {y.row.name} on "
                                     f"{', '.join(sorted(nodes))} from {since}"))


def _ends_after(row: ResRow, t: datetime) -> bool:
    return row.end is None or row.end > t


def _overlap(a: ResRow, b: ResRow) -> bool:
    return _ends_after(a, b.start) and _ends_after(b, a.start)
