"""Throttling policies: per-credential MAXJOB, MAXPROC, MAXPS, MAXNODE and MAXIJOB.

Each limit is a (soft, hard) pair.  Priority scheduling honours the soft limit; once
priority scheduling is over, backfill may start a job up to the hard limit (Maui's
"soft limits are relaxed when resources would otherwise sit idle").  MAXIJOB caps how
many idle jobs of a credential are considered at all in one iteration.
"""

from __future__ import annotations

from collections import defaultdict

from grid_tasks.maui.config import CREDENTIAL_KINDS, SchedulerConfig, throttle_limit
from grid_tasks.maui.model import Job
from grid_tasks.maui.priority import credential

SOFT, HARD = 0, 1


class Throttle:
    """Running usage per credential and the checks against configured limits."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.active = any(config.throttles.get(k) for k in CREDENTIAL_KINDS)
        # (kind, name) -> [jobs, procs, proc-seconds, nodes]
        self.usage: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0, 0.0, 0])
        self.idle_seen: dict[tuple[str, str], int] = defaultdict(int)

    def _limits(self, kind: str, name: str) -> dict:
        table = self.config.throttles.get(kind, {})
        return table.get(name) or table.get("DEFAULT") or {}

    def _keys(self, job: Job) -> list[tuple[str, str]]:
        return [(k, n) for k in CREDENTIAL_KINDS if (n := credential(job, k)) is not None]

    def new_iteration(self) -> None:
        self.idle_seen.clear()

    def idle_allowed(self, job: Job) -> bool:
        """MAXIJOB: False once the credential already has its quota of idle jobs considered."""
        if not self.active:
            return True
        ok = True
        keys = self._keys(job)
        for key in keys:
            lim = throttle_limit(self._limits(*key), "MAXIJOB")
            if lim is not None and self.idle_seen[key] >= lim[HARD]:
                ok = False
        if ok:
            for key in keys:
                self.idle_seen[key] += 1
        return ok

    def allows(self, job: Job, nodes: int, level: int) -> bool:
        """Would starting ``job`` on ``nodes`` nodes keep every credential within its limits?"""
        if not self.active:
            return True
        extra = (1, job.procs, job.procs * job.walltime, nodes)
        for key in self._keys(job):
            limits = self._limits(*key)
            if not limits:
                continue
            used = self.usage[key]
            for i, name in enumerate(("MAXJOB", "MAXPROC", "MAXPS", "MAXNODE")):
                lim = throttle_limit(limits, name)
                if lim is not None and used[i] + extra[i] > lim[level]:
                    return False
        return True

    def ever_allows(self, job: Job, nodes: int = 1) -> bool:
        """Would ``job`` pass its hard limits with nothing of its credentials running?
        (False: it can never start, whatever ends.)"""
        if not self.active:
            return True
        extra = (1, job.procs, job.procs * job.walltime, nodes)
        for key in self._keys(job):
            limits = self._limits(*key)
            for i, name in enumerate(("MAXJOB", "MAXPROC", "MAXPS", "MAXNODE")):
                lim = throttle_limit(limits, name) if limits else None
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
        for key in self._keys(job):
            used = self.usage[key]
            used[0] += sign
            used[1] += sign * job.procs
            used[2] += sign * job.procs * seconds
            used[3] += sign * nodes
