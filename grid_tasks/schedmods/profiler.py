"""The system profiler module (seed 004, 3.6): warn before the scheduler gets into trouble.

Checks are small interchangeable classes with ``run(thresholds) -> list[Finding]``:
:class:`DiskCheck` (free space where logs and state are written), :class:`RedisCheck`
(broker/coordination store ping) and :class:`DatabaseCheck` (``SELECT 1``).  Pings run
in a helper thread and are abandoned after ``timeout_s``, so a hung service never
stalls the scheduling iteration.  Findings are returned and logged (warning/error).
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

from sqlalchemy import text

from grid_tasks.maui.model import IterationResult
from grid_tasks.maui.modules import SchedModule, register_module
from grid_tasks.schedmods.context import ModuleContext, ProfilerThresholds, current_context
from grid_tasks.schedmods.logrotate import log_path

if TYPE_CHECKING:  # pragma: no cover
    from grid_tasks.maui.cfg import MauiConfig
    from grid_tasks.maui.scheduler import Scheduler

log = logging.getLogger(__name__)


class Severity(str, Enum):
    """How bad a finding is."""

    OK = "ok"
    WARNING = "warning"
    CRITICAL = "critical"


@dataclass(frozen=True)
class Finding:
    """One observation: which check, about what, how bad, the measure and why."""

    check: str
    target: str
    severity: Severity
    message: str
    value: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.check, "target": self.target, "severity": self.severity.value,
                "message": self.message, "value": self.value}


@dataclass(frozen=True)
class ProfileReport:
    """Every finding of one profile, taken at ``at`` (POSIX seconds)."""

    at: float
    findings: list[Finding] = field(default_factory=list)

    @property
    def worst(self) -> Severity:
        order = [Severity.OK, Severity.WARNING, Severity.CRITICAL]
        return max((f.severity for f in self.findings), key=order.index, default=Severity.OK)

    def problems(self) -> list[Finding]:
        """The findings that are not OK."""
        return [f for f in self.findings if f.severity is not Severity.OK]

    def to_dict(self) -> dict[str, Any]:
        return {"at": self.at, "worst": self.worst.value,
                "findings": [f.to_dict() for f in self.findings]}


class Check(Protocol):
    """What the profiler runs."""

    def run(self, limits: ProfilerThresholds) -> list[Finding]: ...


def _existing(path: Path) -> Path:
    # disk_usage needs an existing path; a directory not made yet lives on its parent's disk.
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


@dataclass(frozen=True)
class DiskCheck:
    """Free space of the file system holding ``path``."""

    label: str
    path: Path

    def run(self, limits: ProfilerThresholds) -> list[Finding]:
        try:
            usage = shutil.disk_usage(_existing(self.path))
        except OSError as exc:
            return [Finding("disk", self.label, Severity.CRITICAL,
                            f"cannot measure {self.path}: {exc.strerror or exc}")]
        free_mb = usage.free / 2**20
        pct = 100.0 * usage.free / usage.total if usage.total else 0.0
        where = f"{self.label} ({self.path}): {free_mb:.0f} MB free ({pct:.1f}%)"
        if pct < limits.critical_free_percent or free_mb < limits.critical_free_mb:
            sev, why = Severity.CRITICAL, " -- writes will soon fail"
        elif pct < limits.warn_free_percent or free_mb < limits.warn_free_mb:
            sev, why = (Severity.WARNING, f" -- below {limits.warn_free_percent:g}% or "
                        f"{limits.warn_free_mb:g} MB")
        else:
            sev, why = Severity.OK, ""
        return [Finding("disk", self.label, sev, where + why, round(free_mb, 1))]


def timed_call(fn: Callable[[], object], timeout_s: float) -> tuple[float | None, str | None]:
    """(milliseconds, None) when ``fn`` returns within ``timeout_s``; else (None, reason)."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        start = time.perf_counter()
        try:
            fn()
            outcome["ms"] = (time.perf_counter() - start) * 1000.0
        except Exception as exc:  # any failure to answer is the finding itself
            outcome["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())}"

    worker = threading.Thread(target=target, name="profiler-ping", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        return None, f"no answer within {timeout_s:g} s"
    if "error" in outcome:
        return None, outcome["error"]
    return outcome["ms"], None


def _ping_finding(check: str, label: str, ms: float | None, error: str | None,
                  slow_ms: float) -> Finding:
    if error is not None:
        return Finding(check, label, Severity.CRITICAL, f"{label} unreachable: {error}")
    assert ms is not None
    if ms > slow_ms:
        return Finding(check, label, Severity.WARNING,
                       f"{label} answered in {ms:.1f} ms (slower than {slow_ms:g} ms)", ms)
    return Finding(check, label, Severity.OK, f"{label} answered in {ms:.1f} ms", ms)


@dataclass(frozen=True)
class RedisCheck:
    """``PING`` of a Redis client (broker, tokens, heartbeats)."""

    label: str
    client: Any

    def run(self, limits: ProfilerThresholds) -> list[Finding]:
        ms, error = timed_call(self.client.ping, limits.timeout_s)
        return [_ping_finding("broker", self.label, ms, error, limits.broker_slow_ms)]


@dataclass(frozen=True)
class DatabaseCheck:
    """``SELECT 1`` through a session factory."""

    label: str
    sessions: Callable[[], Any]

    def _ping(self) -> None:
        session = self.sessions()
        try:
            session.execute(text("SELECT 1"))
        finally:
            session.close()

    def run(self, limits: ProfilerThresholds) -> list[Finding]:
        ms, error = timed_call(self._ping, limits.timeout_s)
        return [_ping_finding("database", self.label, ms, error, limits.database_slow_ms)]


def default_checks(cfg: "MauiConfig", context: ModuleContext) -> list[Check]:
    """Disk of the log file and of the state dir, the Redis client, the database."""
    checks: list[Check] = [DiskCheck("logs", log_path(cfg, context).parent),
                           DiskCheck("state", Path(context.state_dir))]
    if context.redis is not None:
        checks.append(RedisCheck("redis", context.redis))
    if context.sessions is not None:
        checks.append(DatabaseCheck("database", context.sessions))
    return checks


# The live loop builds a scheduler (and this module) every iteration: remember the
# last report per context so start-ups within ``every_s`` do not ping again.
_recent: dict[tuple[str, str | None], ProfileReport] = {}


@register_module("profiler")
class SystemProfiler(SchedModule):
    """Profiles at start, then at most every ``thresholds.every_s`` seconds of iteration time."""

    def __init__(self, cfg: "MauiConfig | None" = None, context: ModuleContext | None = None,
                 checks: list[Check] | None = None) -> None:
        self.context = context or current_context()
        cfg = cfg or self.context.maui_config()
        self.limits = self.context.thresholds
        self.checks = list(checks) if checks is not None else default_checks(cfg, self.context)
        self.last: ProfileReport | None = None

    def profile(self, now: float) -> ProfileReport:
        """Run every check now and log what is wrong."""
        findings: list[Finding] = []
        for check in self.checks:
            findings.extend(check.run(self.limits))
        report = ProfileReport(now, findings)
        for f in report.problems():
            level = logging.ERROR if f.severity is Severity.CRITICAL else logging.WARNING
            log.log(level, "system profiler: %s", f.message)
        self.last = _recent[self._key] = report
        return report

    @property
    def _key(self) -> tuple[str, str | None]:
        return (str(self.context.state_dir), self.context.rm)

    def on_start(self, scheduler: "Scheduler") -> None:
        now = self.context.clock()
        recent = _recent.get(self._key)
        if recent is not None and 0 <= now - recent.at < self.limits.every_s:
            self.last = recent
            return
        self.profile(now)

    def on_iteration(self, scheduler: "Scheduler", result: IterationResult) -> None:
        if self.last is None or result.now - self.last.at >= self.limits.every_s:
            self.profile(result.now)

    def on_shutdown(self, scheduler: "Scheduler") -> None:
        """Nothing to release."""
