"""``diagnose -f``: fairshare per credential, exactly as the RM's Maui core sees it.

Nothing is recomputed here: the RM's scheduler is loaded from SQL
(:func:`grid_tasks.ops.plan.load_scheduler`, which charges the accounting records
of the last FSDEPTH windows) and its :class:`grid_tasks.maui.priority.Fairshare`
is asked for the per-window usage, the decayed percent (``percent``) and the
signed distance to the target (``delta``) that the priority's FS component uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from grid_tasks.maui.config import CREDENTIAL_KINDS, FSTarget

from .common import check_rm, epoch, from_epoch, scheduled_rms
from .plan import load_scheduler
from .timefmt import iso


def target_text(target: FSTarget | None) -> str | None:
    """``20``, ``20+`` (floor), ``20-`` (ceiling): the maui.cfg notation of a target."""
    return None if target is None else f"{target.value:g}{target.mode}"


@dataclass(frozen=True)
class FairshareRow:
    """One credential's fairshare on one RM."""

    kind: str  # USER, GROUP, ACCOUNT, CLASS, QOS
    name: str
    windows: list[float]  # processor-hours charged per window, newest first
    usage_percent: float  # decayed share of all usage (what the core compares)
    target: str | None
    delta: float  # target - usage as the core bounds it (floor/ceiling)
    weight: float  # FSWEIGHT x FS<KIND>WEIGHT
    component: float  # weight x delta: this credential's part of a job's priority

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name,
                "windows": [round(w, 4) for w in self.windows],
                "usage_percent": round(self.usage_percent, 4), "target": self.target,
                "delta": round(self.delta, 4), "weight": self.weight,
                "priority_component": round(self.component, 4)}


@dataclass
class FairshareReport:
    """The fairshare configuration and usage of one RM at ``now``."""

    rm: str
    now: datetime
    policy: str
    interval: float
    depth: int
    decay: float
    window_starts: list[datetime] = field(default_factory=list)  # newest first
    totals: list[float] = field(default_factory=list)  # all usage per window (proc-hours)
    rows: list[FairshareRow] = field(default_factory=list)

    @property
    def enabled(self) -> bool:
        return self.policy.upper() != "NONE"

    def row(self, kind: str, name: str | None) -> FairshareRow | None:
        """The row of one credential, if it has usage or a target."""
        return next((r for r in self.rows if r.kind == kind and r.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {"rm": self.rm, "now": iso(self.now), "policy": self.policy,
                "enabled": self.enabled, "interval_s": self.interval, "depth": self.depth,
                "decay": self.decay, "window_starts": [iso(w) for w in self.window_starts],
                "totals": [round(t, 4) for t in self.totals],
                "rows": [r.to_dict() for r in self.rows]}


def fairshare_report(session: Session, rm: str, now: datetime, *,
                     registry: Any = None) -> FairshareReport:
    """Fairshare of every credential with usage in the windows or a configured target."""
    sched = load_scheduler(session, rm, now, registry)
    cfg, fs, t = sched.config, sched.fairshare, epoch(now)
    report = FairshareReport(rm, now, cfg.fs_policy.value, cfg.fs_interval, cfg.fs_depth,
                             cfg.fs_decay)
    if not fs.enabled:
        return report
    current = int(t // cfg.fs_interval)
    slots = [current - i for i in range(cfg.fs_depth)]
    report.window_starts = [from_epoch(s * cfg.fs_interval) for s in slots]
    report.totals = [fs.totals.get(s, 0.0) / 3600.0 for s in slots]
    for kind in CREDENTIAL_KINDS:
        targets = cfg.fs_targets.get(kind, {})
        weight = cfg.weights["FSWEIGHT"] * cfg.weights[f"FS{kind}WEIGHT"]
        for name in sorted(set(fs.usage[kind]) | set(targets)):
            usage = fs.usage[kind].get(name, {})
            delta = fs.delta(kind, name, t)
            report.rows.append(FairshareRow(
                kind, name, [usage.get(s, 0.0) / 3600.0 for s in slots],
                fs.percent(kind, name, t), target_text(targets.get(name)), delta, weight,
                weight * delta))
    return report


def diagnose_fairshare(session: Session, now: datetime, *, rm: str | None = None,
                       registry: Any = None) -> list[FairshareReport]:
    """``diagnose -f``: the fairshare report of ``rm``, or of every RM."""
    check_rm(session, rm)
    names = scheduled_rms(session, rm)
    return [fairshare_report(session, n, now, registry=registry) for n in names]
