"""``showstart`` and ``showbf``: earliest starts and free (backfill) windows of an RM.

Both answer on the plan of :func:`grid_tasks.ops.plan.load_plan`: the RM's core
after one in-memory iteration, so idle jobs of higher priority already hold their
reservations and a request is placed behind them, as Maui's showstart does.  A Slurm
RM has no such core here: showstart asks it through the RM interface (its estimate,
``sbatch --test-only``), exactly as a broker does.

A request given as RSL is read by :mod:`grid_tasks.ops.rsl_request`, imported by
:func:`show_start` only for such a request: each showstart is a new process, and the
RSL parser was a twentieth of ``showstart JOB``'s answer time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from grid_tasks.legion.refusals import ReservationRefused
from grid_tasks.maui import Job
from grid_tasks.scheduling.rm_backend import RMBackend
from grid_tasks.scheduling.rm_kinds import backend_for
from grid_tasks.topology import GridTopology, RMKind

from .common import Section, from_epoch, resolve_job, section_of
from .plan import Plan, core_view, parse_request
from .plan_cache import Plans
from .timefmt import INFINITE, OpsError, iso, json_seconds


@dataclass(frozen=True)
class StartRow:
    """One showstart answer: the request could start at ``start`` on ``allocation``."""

    start: datetime
    allocation: dict[str, int]

    def to_dict(self, now: datetime) -> dict[str, Any]:
        return {"start": iso(self.start), "start_in": json_seconds((self.start - now).total_seconds()),
                "allocation": dict(self.allocation)}


@dataclass(frozen=True)
class StartReport:
    """showstart output for one request."""

    rm: str
    request: str
    procs: int
    walltime: float
    now: datetime
    estimates: list[StartRow]
    job_id: int | None = None
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"rm": self.rm, "request": self.request, "job_id": self.job_id,
                "procs": self.procs, "walltime": json_seconds(self.walltime),
                "now": iso(self.now), "estimates": [e.to_dict(self.now) for e in self.estimates],
                "note": self.note}


def request_kind(text: str) -> str:
    """``job`` (an id or contact), ``procs`` (PROCS@DURATION) or ``rsl``."""
    stripped = text.strip()
    if stripped[:1] in ("&", "+", "("):
        return "rsl"
    if "@" in stripped and stripped.split("@", 1)[0].isdigit():
        return "procs"
    return "job"


def show_start(session: Session, what: str, now: datetime, *, rm: str | None = None,
               registry: Any = None, limit: int = 3,
               topology: GridTopology | None = None, plans: Plans | None = None) -> StartReport:
    """showstart JOB | PROCS@DURATION | RSL on ``rm`` (a job's own RM by default);
    ``topology`` says which RMs are not native (Slurm clusters); ``plans`` where the
    RM's plan comes from (a fresh cached one, see :mod:`grid_tasks.ops.plan_cache`;
    by default it is made now)."""
    plans = plans or Plans(registry=registry)
    kind = request_kind(what)
    if kind == "job":
        return _job_start(session, what, now, rm, registry, limit, topology, plans)
    if rm is None:
        raise OpsError("showstart: give -r RM for a resource request")
    if kind == "procs":
        core = parse_request(what)
    else:
        from .rsl_request import rsl_request  # the RSL parser: only here (start-up time)

        core = rsl_request(what)
    backend = backend_for(rm, topology, registry=registry)
    if backend.kind is not RMKind.MAUI:
        return _asked(session, backend, what, core, now, limit)
    plan = plans.plan(session, rm, now)
    _check_fits(plan, what, core)
    return _report(plan, what, core, _estimates(plan, core, limit))


def _asked(session: Session, backend: RMBackend, what: str, core: Job, now: datetime,
           limit: int, job_id: int | None = None) -> StartReport:
    """showstart on an RM answering through the RM interface (a Slurm cluster)."""
    t = now.timestamp()
    try:
        found = backend.estimate(session, procs=core.procs, duration=core.walltime,
                                 not_before=t, now=t, limit=limit)
    except ReservationRefused as exc:
        raise OpsError(f"showstart: {exc}") from None
    rows = [StartRow(from_epoch(e["time"]), dict(e["allocation"])) for e in found]
    note = None if rows else (f"no start found: {backend.rm} ({backend.kind.value}) can never "
                              f"hold {core.procs} processors")
    return StartReport(backend.rm, what, core.procs, core.walltime, now, rows, job_id, note)


def _check_fits(plan: Plan, what: str, core: Job) -> None:
    """A request larger than the RM's configured nodes can ever hold is an error naming
    the RM's size (an empty answer would read as "no start yet")."""
    nodes = list(plan.scheduler.engine.nodes.values())
    procs = sum(n.procs for n in nodes)
    size = (f"{plan.rm} has {procs} processors on {len(nodes)} node"
            f"{'s' if len(nodes) != 1 else ''}")
    if core.procs > procs:
        raise OpsError(f"showstart: {what!r} can never run on {plan.rm}: it asks for "
                       f"{core.procs} processors and {size}")


def _estimates(plan: Plan, core: Job, limit: int) -> list[StartRow]:
    return [StartRow(from_epoch(e.time), dict(e.allocation))
            for e in plan.scheduler.estimate(core, plan.t, limit)]


def _report(plan: Plan, what: str, core: Job, rows: list[StartRow], job_id: int | None = None,
            note: str | None = None) -> StartReport:
    if not rows and note is None:
        note = "no start found: the request can never fit this resource manager's usable nodes"
    return StartReport(plan.rm, what, core.procs, core.walltime, plan.now, rows, job_id, note)


def _job_start(session: Session, what: str, now: datetime, rm: str | None, registry: Any,
               limit: int, topology: GridTopology | None, plans: Plans) -> StartReport:
    job = resolve_job(session, what)
    if rm is not None and rm != job.rm:
        raise OpsError(f"job {job.id} belongs to {job.rm}, not {rm}")
    section = section_of(job, set())
    if section in (Section.ACTIVE, Section.COMPLETED):
        raise OpsError(f"job {job.id} is not waiting (it is {job.state.value}); "
                       f"showstart answers for idle jobs")
    backend = backend_for(str(job.rm), topology, registry=registry)
    if backend.kind is not RMKind.MAUI:  # Slurm queues it: ask as if it came now
        return _asked(session, backend, what, core_view(job), now, limit, job.id)
    plan = plans.plan(session, str(job.rm), now)
    core = plan.idle.get(str(job.id))
    if core is None and plan.in_queue(str(job.id)):
        core = core_view(job)  # a plan replayed from its digest holds no idle job
    elif core is None:
        core = core_view(job)
        rows = _estimates(plan, core, limit)
        return _report(plan, what, core, rows, job.id,
                       "the job is not in the idle queue (held or not yet queued): "
                       "estimate as if it were released now")
    started = plan.started.get(core.id)
    if started is not None:
        return _report(plan, what, core, [StartRow(plan.now, dict(started.allocation))],
                       job.id, "starts at the next iteration")
    for res in plan.scheduler.reservations():
        if res.job_id == core.id and res.start < INFINITE:
            return _report(plan, what, core, [StartRow(from_epoch(res.start),
                                                       dict(res.allocation))],
                           job.id, "from the job's reservation")
    return _report(plan, what, core, _estimates(plan, core, limit), job.id)


@dataclass(frozen=True)
class WindowRow:
    """One showbf line: ``procs`` processors on ``nodes`` nodes free for ``duration``."""

    procs: int
    nodes: int
    duration: float

    def to_dict(self) -> dict[str, Any]:
        return {"procs": self.procs, "nodes": self.nodes, "duration": json_seconds(self.duration)}


def show_backfill(session: Session, rm: str, now: datetime, *, min_duration: float | None = None,
                  min_nodes: int | None = None, registry: Any = None,
                  plans: Plans | None = None) -> list[WindowRow]:
    """showbf: processors free now and how long each level lasts, widest first; only
    windows lasting at least ``min_duration`` on at least ``min_nodes`` nodes."""
    plan = (plans or Plans(registry=registry)).plan(session, rm, now)
    rows = [WindowRow(w.procs, w.nodes, w.duration) for w in plan.scheduler.free_windows(plan.t)]
    return [r for r in rows if (min_duration is None or r.duration >= min_duration)
            and (min_nodes is None or r.nodes >= min_nodes)]
