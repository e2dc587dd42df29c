"""Throttling policies: per-credential MAXJOB, MAXPROC, MAXPS, MAXNODE and MAXIJOB.

Each limit is a (soft, hard) pair.  Priority scheduling honours the soft limit; once
priority scheduling is over, backfill may start a job up to the hard limit (Maui's
"soft limits are relaxed when resources would otherwise sit idle").  MAXIJOB caps how
many idle jobs of a credential are considered at all in one iteration.

The checks run for every idle job of every iteration, so what a job's credentials
are limited by is worked out once per credential tuple (:class:`_Plan`), and the
running usage is kept incrementally, one list per credential, updated at each start
and end.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from grid_tasks.maui.config import CREDENTIAL_KINDS, SchedulerConfig, throttle_limit
from grid_tasks.maui.model import Job
from grid_tasks.maui.priority import credential

SOFT, HARD = 0, 1
_RUNNING_LIMITS = ("MAXJOB", "MAXPROC", "MAXPS", "MAXNODE")

Limit = tuple[float, float] | None


@dataclass
class _Plan:
    """What the limits of one credential tuple need: usage lists and parsed limits."""

    usage: list[list[float]]  # [jobs, procs, proc-seconds, nodes] per credential of the job
    checks: list[tuple[list[float], tuple[Limit, ...]]]  # (usage, limits) where any is set
    idle: list[tuple[tuple[str, str], float]]  # (credential, MAXIJOB hard) where set


class Throttle:
    """Running usage per credential and the checks against configured limits."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.active = any(config.throttles.get(k) for k in CREDENTIAL_KINDS)
        # (kind, name) -> [jobs, procs, proc-seconds, nodes]
        self.usage: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0, 0.0, 0])
        self.idle_seen: dict[tuple[str, str], int] = defaultdict(int)
        self._plans: dict[tuple, _Plan] = {}

    def _limits(self, kind: str, name: str) -> dict:
        table = self.config.throttles.get(kind, {})
        return table.get(name) or table.get("DEFAULT") or {}

    def _keys(self, job: Job) -> list[tuple[str, str]]:
        return [(k, n) for k in CREDENTIAL_KINDS if (n := credential(job, k)) is not None]

    def _plan(self, job: Job) -> _Plan:
        creds = (job.user, job.group, job.account, job.job_class, job.qos)
        plan = self._plans.get(creds)
        if plan is None:
            plan = self._plans[creds] = _Plan([], [], [])
            for key in self._keys(job):
                used = self.usage[key]
                plan.usage.append(used)
                limits = self._limits(*key)
                if not limits:
                    continue
                lims = tuple(throttle_limit(limits, name) for name in _RUNNING_LIMITS)
                if any(lim is not None for lim in lims):
                    plan.checks.append((used, lims))
                maxi = throttle_limit(limits, "MAXIJOB")
                if maxi is not None:
                    plan.idle.append((key, maxi[HARD]))
        return plan

    def new_iteration(self) -> None:
        self.idle_seen.clear()

    def counts_idle(self, job: Job) -> bool:
        """Whether a MAXIJOB limit counts the job among its credentials' idle jobs."""
        return self.active and bool(self._plan(job).idle)

    def idle_allowed(self, job: Job) -> bool:
        """MAXIJOB: False once the credential already has its quota of idle jobs considered."""
        if not self.active:
            return True
        quota = self._plan(job).idle
        if not quota:
            return True
        seen = self.idle_seen
        if any(seen[key] >= lim for key, lim in quota):
            return False
        for key, _ in quota:
            seen[key] += 1
        return True

    def allows(self, job: Job, nodes: int, level: int) -> bool:
        """Would starting ``job`` on ``nodes`` nodes keep every credential within its limits?"""
        if not self.active:
            return True
        checks = self._plan(job).checks
        if not checks:
            return True
        extra = (1, job.procs, job.procs * job.walltime, nodes)
        for used, lims in checks:
            for i in range(4):
                lim = lims[i]
                if lim is not None and used[i] + extra[i] > lim[level]:
                    return False
        return True

    def ever_allows(self, job: Job, nodes: int = 1) -> bool:
        """Would ``job`` pass its hard job, processor and node limits with nothing of
        its credentials running?  False: it can never start, whatever ends (every start
        passes the hard limits; usage never goes below zero).  MAXPS is left out: its
        running sum is a float that may keep a rounding residue."""
        if not self.active:
            return True
        extra = (1, job.procs, 0.0, nodes)
        for _, lims in self._plan(job).checks:
            for i in (0, 1, 3):
                lim = lims[i]
                if lim is not None and extra[i] > lim[HARD]:
                    return False
        return True

    def started(self, job: Job, nodes: int, now: float) -> None:
        self._apply(job, nodes, job.walltime, +1)

    def ended(self, job: Job, nodes: int, remaining: float) -> None:
        self._apply(job, nodes, remaining, -1)

    def _apply(self, job: Job, nodes: int, seconds: float, sign: int) -> None:
        if not self.active:
            return
        for used in self._plan(job).usage:
            used[0] += sign
            used[1] += sign * job.procs
            used[2] += sign * job.procs * seconds
            used[3] += sign * nodes
