"""Throttles that can never let a job start, found before a replay runs.

A credential limit below one job's own size (``USERCFG[DEFAULT] MAXPROC=16`` and a
64-processor job) does not delay that job: the core can never start it, and a replay
quietly ends with it still waiting.  A site trying its maui.cfg on a trace should hear
that before the replay, once per limit, with the line that set it — not discover
later that a policy "won" on fewer jobs.

The check mirrors the core's throttle lookup (:class:`grid_tasks.maui.throttle.Throttle`):
a credential's own ``*CFG[name]`` entry, when it sets any limit, replaces the
``DEFAULT`` one; a job starts only if every credential stays within the hard limit
of MAXJOB, MAXPROC, MAXPS (processors x walltime) and MAXNODE.  Pure: jobs in,
findings out; no clock and no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from grid_tasks.maui import Job
from grid_tasks.maui.cfg import MauiConfig
from grid_tasks.maui.config import CREDENTIAL_KINDS, throttle_limit
from grid_tasks.maui.priority import credential

__all__ = ["LimitSource", "NeverStart", "limit_sources", "never_start", "NEVER_KEYS"]

#: Limits a job alone can exceed (MAXIJOB only caps how many idle jobs are considered).
NEVER_KEYS = ("MAXJOB", "MAXPROC", "MAXPS", "MAXNODE")
#: System-wide forms (MAXPROCPERUSERCOUNT ...): the bridge makes them the kind's DEFAULT.
_GLOBAL = re.compile(r"^MAX(JOB|PROC|NODE|PS)PER(USER|GROUP|ACCOUNT)COUNT$")
_UNITS = {"MAXPROC": "processors", "MAXPS": "processor-seconds", "MAXNODE": "nodes"}
_PLURAL = {"USER": "users", "GROUP": "groups", "ACCOUNT": "accounts", "CLASS": "classes",
           "QOS": "qos"}
_SHOWN_NAMES = 5

Key = tuple[str, str, str]  # (credential kind, entry name or DEFAULT, limit key)


@dataclass(frozen=True)
class LimitSource:
    """Where a limit was set: ``USERCFG[DEFAULT] MAXPROC`` in ``maui.cfg`` line 61."""

    text: str
    source: str
    line: int | None = None

    def where(self) -> str:
        return f"{self.source}:{self.line}" if self.line is not None else self.source


@dataclass
class NeverStart:
    """One limit that keeps some jobs from ever starting, and those jobs."""

    kind: str
    entry: str
    key: str
    limit: tuple[float, float]
    source: LimitSource | None = None
    job_ids: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    largest: float = 0.0

    @property
    def jobs(self) -> int:
        return len(self.job_ids)

    def setting(self) -> str:
        """``USERCFG[DEFAULT] MAXPROC=16`` (soft,hard when they differ)."""
        soft, hard = (_number(v) for v in self.limit)
        value = hard if soft == hard else f"{soft},{hard}"
        if self.source is not None:
            return f"{self.source.text}={value}" if "[" in self.source.text \
                else f"{self.source.text} {value}"
        return f"{self.kind}CFG[{self.entry}] {self.key}={value}"

    def message(self) -> str:
        """One line for the operator, e.g. ``maui.cfg:61: USERCFG[DEFAULT] MAXPROC=16
        is below 23 jobs of up to 64 processors (users 12, 40, ...): they can never start``."""
        shown = ", ".join(self.names[:_SHOWN_NAMES]) + (", ..." if len(self.names) > _SHOWN_NAMES
                                                        else "")
        kinds = _PLURAL[self.kind] if len(self.names) > 1 else self.kind.lower()
        who = f"{kinds} {shown}" if shown else f"no {self.kind.lower()} name"
        head = f"{self.source.where()}: " if self.source is not None else ""
        if self.key == "MAXJOB":
            return (f"{head}{self.setting()} lets no job of it run: {self.jobs:,} job(s) "
                    f"({who}) can never start")
        return (f"{head}{self.setting()} is below {self.jobs:,} job(s) of up to "
                f"{_number(self.largest)} {_UNITS[self.key]} ({who}): they can never start")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "entry": self.entry, "key": self.key,
                "limit": self.limit[1], "jobs": self.jobs, "largest": self.largest,
                "names": self.names, "source": self.source.source if self.source else None,
                "line": self.source.line if self.source else None, "message": self.message()}


def _number(value: float) -> str:
    if value == float("inf"):
        return "-1"
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,}"


def _size(job: Job, key: str, nodes: int) -> float:
    if key == "MAXJOB":
        return 1.0
    if key == "MAXPROC":
        return float(job.procs)
    if key == "MAXPS":
        return float(job.procs) * job.walltime
    return float(nodes)


def never_start(throttles: Mapping[str, Mapping[str, Mapping[str, Any]]], jobs: Iterable[Job],
                *, nodes: int = 1, sources: Mapping[Key, LimitSource] | None = None
                ) -> list[NeverStart]:
    """The limits of ``throttles`` (SchedulerConfig.throttles) that some of ``jobs`` exceed
    on their own, one finding per (kind, entry, key), ordered by the line that set it.

    ``nodes`` is the node count each job occupies; the simulator runs every trace on one
    pool node, so 1 there.
    """
    kinds = [k for k in CREDENTIAL_KINDS if throttles.get(k)]
    applying: dict[tuple[str, str], list[tuple[Key, tuple[float, float]]]] = {}
    found: dict[Key, NeverStart] = {}
    for job in jobs:
        for kind in kinds:
            name = credential(job, kind)
            if name is None:
                continue
            limits = applying.get((kind, name))
            if limits is None:
                limits = applying[(kind, name)] = _applying(throttles[kind], kind, name)
            for key3, lim in limits:
                size = _size(job, key3[2], nodes)
                if size <= lim[1]:
                    continue
                hit = found.get(key3)
                if hit is None:
                    hit = found[key3] = NeverStart(*key3, lim, (sources or {}).get(key3))
                hit.job_ids.append(job.id)
                hit.largest = max(hit.largest, size)
                if name not in hit.names:
                    hit.names.append(name)
    for hit in found.values():
        hit.names.sort(key=_name_order)
    return sorted(found.values(), key=_finding_order)


def _applying(table: Mapping[str, Mapping[str, Any]], kind: str,
              name: str) -> list[tuple[Key, tuple[float, float]]]:
    """The limits one credential runs under: its own entry if it sets any, else DEFAULT
    (the core's lookup)."""
    entry = name if table.get(name) else "DEFAULT"
    limits = table.get(entry) or {}
    return [((kind, entry, key), lim) for key in NEVER_KEYS
            if (lim := throttle_limit(limits, key)) is not None]


def _name_order(name: str) -> tuple[int, int, str]:
    return (0, int(name), "") if name.isdigit() else (1, 0, name)


def _finding_order(hit: NeverStart) -> tuple[int, int, str, int]:
    line = hit.source.line if hit.source is not None and hit.source.line is not None else 0
    return (line, CREDENTIAL_KINDS.index(hit.kind), hit.entry, NEVER_KEYS.index(hit.key))


def limit_sources(cfg: MauiConfig) -> dict[Key, LimitSource]:
    """Where each (kind, entry, key) limit of a parsed maui.cfg was set.

    A ``*CFG[DEFAULT]`` key overrides the system-wide ``MAX<X>PER<KIND>COUNT`` (the
    bridge applies them in that order), so it is the one cited when both are set.
    """
    out: dict[Key, LimitSource] = {}
    for name in cfg.settings:
        match = _GLOBAL.match(name)
        if match:
            key, kind = f"MAX{match.group(1)}", match.group(2)
            where = cfg.where(name)
            out[(kind, "DEFAULT", key)] = LimitSource(name, cfg.source, where and where[0])
    for (param, entry, key), (line, _column) in cfg.positions.items():
        kind = param[:-3]
        if param.endswith("CFG") and kind in CREDENTIAL_KINDS and key in NEVER_KEYS:
            out[(kind, entry, key)] = LimitSource(f"{param}[{entry}] {key}", cfg.source, line)
    return out
