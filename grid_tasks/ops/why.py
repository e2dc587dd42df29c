"""Why a job does not start (``checkjob``'s and ``diagnose -j``'s explanation).

The Maui core has no explanation API, so the reasons are derived here from what is
public: the SQL job (holds, dependencies, Maui state), the RM's nodes, the loaded
scheduler's throttling usage and limits (``Scheduler.throttle``,
``SchedulerConfig.throttles``), its reservations (``Scheduler.reservations()``),
whether the job could ever fit (``Scheduler.engine.can_ever_fit``) and its earliest
start (``Scheduler.estimate``).  Reasons are listed in the order Maui checks them:
holds, dependencies, state, feasibility, throttling, reservation, resources.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from grid_tasks.db import Job, Node
from grid_tasks.maui.config import CREDENTIAL_KINDS, throttle_limit
from grid_tasks.maui.model import ReservationKind
from grid_tasks.maui.priority import credential
from grid_tasks.states import JobState, MauiJobState

from .common import epoch, from_epoch
from .timefmt import format_duration, iso

_USAGE_INDEX = {"MAXJOB": 0, "MAXPROC": 1, "MAXPS": 2, "MAXNODE": 3}


@dataclass(frozen=True)
class Reason:
    """One cause keeping a job from starting; ``kind`` is hold, dependency, state,
    nodes, never, throttle, reservation, resources, policy or ready."""

    kind: str
    message: str
    at: datetime | None = None  # an expected start, when the reason carries one
    #: what the expected start waits on: running jobs, other jobs' reservations and
    #: administrative reservations holding the same nodes until then
    blocking: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "at": iso(self.at),
                "blocking": list(self.blocking)}


def explain(session: Session, job: Job, now: datetime, plan: Any | None = None) -> list[Reason]:
    """Every reason the (idle or blocked) job is not running at ``now``.

    Without ``plan`` only the SQL facts are used; with one (a
    :class:`grid_tasks.ops.plan.Plan` of the job's RM) throttling, reservations and
    resources are explained too, as the next iteration would see them.
    """
    reasons = [Reason("hold", f"{h} hold is set") for h in job.holds or []]
    reasons += _dependencies(session, job)
    if job.maui_state in (MauiJobState.DEFERRED, MauiJobState.BLOCKED):
        reasons.append(Reason("state", f"job is {job.maui_state.value}: "
                                       f"{job.failure_reason or 'set aside by the scheduler'}"))
    reasons += _too_big(session, job, plan)
    if plan is not None and not reasons:
        reasons += _scheduler_reasons(plan, job, now)
    return reasons


def _dependencies(session: Session, job: Job) -> list[Reason]:
    deps = [int(d) for d in job.dependencies or []]
    if not deps:
        return []
    states = dict(session.execute(select(Job.id, Job.state).where(Job.id.in_(deps))).all())
    out = []
    for dep in deps:
        state = states.get(dep)
        if state is None:
            out.append(Reason("dependency", f"depends on job {dep}, which does not exist"))
        elif JobState(state) is not JobState.DONE:
            out.append(Reason("dependency", f"depends on job {dep}, which is "
                                            f"{JobState(state).value}"))
    return out


def _too_big(session: Session, job: Job, plan: Any | None) -> list[Reason]:
    # Only the configured size: liveness lives in Redis and reaches the plan's scheduler.
    if plan is not None:
        total = sum(n.procs for n in plan.scheduler.engine.nodes.values())
    else:
        total = sum(session.scalars(select(Node.procs).where(Node.rm == job.rm)))
    if job.procs > total:
        return [Reason("never", f"needs {job.procs} processors but {job.rm} has only {total}")]
    return []


def _scheduler_reasons(plan: Any, job: Job, now: datetime) -> list[Reason]:
    core = plan.idle.get(str(job.id))
    if core is None:
        return [Reason("state", f"not in {job.rm}'s idle queue "
                                f"({JobState(job.state).value}/{job.maui_state.value}): "
                                "waits for the job flow to queue it")]
    start = plan.started.get(core.id)
    if start is not None:
        nodes = ", ".join(f"{n}:{k}" for n, k in sorted(start.allocation.items()))
        return [Reason("ready", f"resources are free: starts at the next iteration on {nodes}",
                       now)]
    sched = plan.scheduler
    nodes = list(sched.engine.nodes.values())
    if not any(n.usable for n in nodes):
        states = ", ".join(f"{n.name} {n.state.value}" for n in nodes)
        return [Reason("nodes", f"no usable node in {job.rm} ({states})")]
    if not sched.engine.can_ever_fit(core):
        return [Reason("never", f"{core.tasks} task(s) of {core.task_demand()} "
                                "(procs, memory, disk, swap) never fit the usable nodes")]
    out = throttle_reasons(sched, core)
    out += _reservation_reasons(sched, core, now)
    if any(r.kind == "reservation" for r in out):
        return out
    estimates = sched.estimate(core, epoch(now), limit=1)
    if not estimates:
        out.append(Reason("resources", "no start time found for its resources"))
    elif estimates[0].time > epoch(now) + 0.5:
        at = from_epoch(estimates[0].time)
        alloc = estimates[0].allocation
        nodes = ", ".join(f"{n}:{k}" for n, k in sorted(alloc.items()))
        blocking = blockers(sched, core, set(alloc), estimates[0].time, epoch(now))
        out.append(Reason("resources", f"not enough free resources before higher-priority "
                                       f"work; earliest start in "
                                       f"{format_duration(estimates[0].time - epoch(now))} "
                                       f"on {nodes}{_waits_on(blocking)}", at, blocking))
    elif not out:
        out.append(Reason("policy", "its resources are free now but the iteration would not "
                                    "start it: a higher-priority job is waiting and the "
                                    "backfill policy does not let it overtake"))
    return out


def throttle_reasons(scheduler: Any, core: Any) -> list[Reason]:
    """Credential limits (soft) the job would break if started now."""
    out = []
    throttles = scheduler.config.throttles
    for kind in CREDENTIAL_KINDS:
        name = credential(core, kind)
        table = throttles.get(kind) or {}
        if name is None or not table:
            continue
        limits = table.get(name) or table.get("DEFAULT") or {}
        used = scheduler.throttle.usage.get((kind, name), [0, 0, 0.0, 0])
        extra = (1, core.procs, core.procs * core.walltime, 1)
        for key, index in _USAGE_INDEX.items():
            lim = throttle_limit(limits, key)
            if lim is not None and used[index] + extra[index] > lim[0]:
                out.append(Reason("throttle", f"{kind} {name}: {key} {lim[0]:g} reached "
                                              f"(in use {used[index]:g}, job adds {extra[index]:g})"))
    return out


def _reservation_reasons(scheduler: Any, core: Any, now: datetime) -> list[Reason]:
    for res in scheduler.reservations():
        if res.kind is ReservationKind.JOB and res.job_id == core.id:
            nodes = ", ".join(f"{n}:{k}" for n, k in sorted(res.allocation.items()))
            blocking = blockers(scheduler, core, set(res.allocation), res.start, epoch(now))
            return [Reason("reservation", f"reserved to start in "
                                          f"{format_duration(res.start - epoch(now))} on {nodes}"
                                          f"{_waits_on(blocking)}",
                           from_epoch(res.start), blocking)]
    return []


def blockers(scheduler: Any, core: Any, nodes: set[str], start: float,
             now: float) -> tuple[str, ...]:
    """What holds ``nodes`` between ``now`` and the job's expected ``start``, latest end
    first: running jobs, other jobs' reservations and reservations whose ACL does not
    admit the job.  These are why the start is not earlier."""
    found = []
    for res in scheduler.reservations():
        if res.job_id == core.id or res.start >= start or res.end <= now:
            continue
        if not nodes & (set(res.allocation) | set(res.nodes)):
            continue
        if res.kind is ReservationKind.ADMIN and res.acl.admits(core):
            continue
        found.append((res.end, _describe(res, now)))
    found.sort(key=lambda item: -item[0])
    return tuple(text for _, text in found)


def _describe(res: Any, now: float) -> str:
    ends = ("with no end" if res.end == float("inf")
            else f"ends in {format_duration(res.end - now)}")
    if res.kind is ReservationKind.RUNNING:
        return f"job {res.job_id} (running, {ends})"
    if res.kind is ReservationKind.JOB:
        return f"job {res.job_id} (reserved, {ends})"
    return f"reservation {res.name} ({ends})"


def _waits_on(blocking: tuple[str, ...]) -> str:
    return f"; waits for {', '.join(blocking)}" if blocking else ""
