"""From a parsed maui.cfg (``grid_tasks.maui.cfg.MauiConfig``) to SchedulerConfig arguments."""

from __future__ import annotations

from typing import Any

from grid_tasks.maui.allocation import ALLOCATION_POLICIES
from grid_tasks.maui.cfg import MauiConfigError
from grid_tasks.maui.config import (
    CREDENTIAL_KINDS, DEFAULT_WEIGHTS, THROTTLE_KEYS, FSTarget, SchedulerConfig,
)
from grid_tasks.maui.model import ACL
from grid_tasks.maui.standing import StandingReservation

_FS_MODES = {"TARGET": "", "FLOOR": "+", "CEILING": "-", "CAP": "^"}
_DISTRIBUTIONS = {"DEFAULT": "PACK", "PACK": "PACK", "ROUNDROBIN": "ROUNDROBIN"}
#: system-wide throttles and the credential limit they default
_GLOBAL_THROTTLES = {
    "MAXJOBPERUSERCOUNT": ("USER", "MAXJOB"), "MAXPROCPERUSERCOUNT": ("USER", "MAXPROC"),
    "MAXNODEPERUSERCOUNT": ("USER", "MAXNODE"), "MAXPSPERUSERCOUNT": ("USER", "MAXPS"),
    "MAXJOBQUEUEDPERUSERCOUNT": ("USER", "MAXIJOB"), "MAXJOBPERGROUPCOUNT": ("GROUP", "MAXJOB"),
    "MAXPROCPERGROUPCOUNT": ("GROUP", "MAXPROC"), "MAXJOBPERACCOUNTCOUNT": ("ACCOUNT", "MAXJOB"),
    "MAXPROCPERACCOUNTCOUNT": ("ACCOUNT", "MAXPROC"),
}
_WEIGHT_NAMES = {"SERVWEIGHT": "SERVICEWEIGHT"}


def _unsupported(cfg: Any, name: str, value: object, choices: str) -> Exception:
    where = cfg.where(name) or (None, None)
    return MauiConfigError(f"{name} {value} is not supported by the grid_tasks core; use {choices}",
                           source=cfg.source, line=where[0], column=where[1], key=name)


def _limit(pair: Any) -> tuple[float, float] | None:
    soft, hard = pair
    if soft == -1 and hard == -1:
        return None
    inf = float("inf")
    return (inf if soft == -1 else float(soft), inf if hard == -1 else float(hard))


def _credentials(cfg: Any) -> tuple[dict, dict, dict]:
    prio: dict[str, dict[str, float]] = {}
    targets: dict[str, dict[str, FSTarget]] = {}
    throttles: dict[str, dict[str, dict[str, tuple[float, float]]]] = {}
    for param, (kind, key) in _GLOBAL_THROTTLES.items():
        lim = _limit(cfg.get(param))
        if lim is not None:
            throttles.setdefault(kind, {}).setdefault("DEFAULT", {})[key] = lim
    for kind in CREDENTIAL_KINDS:
        for name, keys in cfg.credentials(kind).items():
            if "PRIORITY" in keys:
                prio.setdefault(kind, {})[name] = float(keys["PRIORITY"])
            if "FSTARGET" in keys:
                t = keys["FSTARGET"]
                targets.setdefault(kind, {})[name] = FSTarget(float(t.percent), _FS_MODES[t.mode])
            for key in THROTTLE_KEYS:
                if key in keys and (lim := _limit(keys[key])) is not None:
                    throttles.setdefault(kind, {}).setdefault(name, {})[key] = lim
    return prio, targets, throttles


def _standing(cfg: Any) -> dict[str, StandingReservation]:
    out = {}
    for name, sr in cfg.standing_reservations.items():
        acl = ACL.build(users=sr.get("USERLIST", ()), groups=sr.get("GROUPLIST", ()),
                        accounts=sr.get("ACCOUNTLIST", ()), classes=sr.get("CLASSLIST", ()),
                        qos=sr.get("QOSLIST", ()))
        procs = sr.get("RESOURCES", {}).get("PROCS", -1)
        tasks = int(sr.get("TASKCOUNT", 0) or 0)
        out[name] = StandingReservation(
            name=name, acl=acl, tasks=tasks if procs != -1 or not sr.get("HOSTLIST") else 0,
            procs_per_task=max(procs, 1), nodes=tuple(sr.get("HOSTLIST", ())),
            start=float(sr.get("STARTTIME", 0)), end=float(sr.get("ENDTIME", 0)),
            period=sr.get("PERIOD", "DAY"), depth=int(sr.get("DEPTH", 2)),
            days=frozenset(sr.get("DAYS", ())))
    return out


def _availability(table: dict[str, str]) -> str:
    """The policy for processors: ``POLICY:PROCS`` if given, else the default one."""
    return table.get("PROCS") or table.get("DEFAULT") or "COMBINED"


def scheduler_config(cfg: Any) -> SchedulerConfig:
    """The :class:`SchedulerConfig` of a parsed ``grid_tasks.maui.cfg.MauiConfig``."""
    return SchedulerConfig(**config_kwargs(cfg))


def config_kwargs(cfg: Any) -> dict[str, Any]:
    """Keyword arguments of :class:`SchedulerConfig` for a parsed maui.cfg."""
    alloc = cfg.get("NODEALLOCATIONPOLICY")
    if alloc not in ALLOCATION_POLICIES:
        raise _unsupported(cfg, "NODEALLOCATIONPOLICY", alloc, ", ".join(ALLOCATION_POLICIES))
    backfill = cfg.get("BACKFILLPOLICY")
    if backfill == "PREEMPT":
        raise _unsupported(cfg, "BACKFILLPOLICY", backfill, "FIRSTFIT, BESTFIT, GREEDY or NONE")
    dist = cfg.get("TASKDISTRIBUTIONPOLICY")
    if dist not in _DISTRIBUTIONS:
        raise _unsupported(cfg, "TASKDISTRIBUTIONPOLICY", dist, "DEFAULT, PACK or ROUNDROBIN")
    prio, targets, throttles = _credentials(cfg)
    return {
        "reservation_depth": cfg.get("RESERVATIONDEPTH"),
        "reservation_policy": cfg.get("RESERVATIONPOLICY"),
        "backfill_policy": backfill,
        "backfill_metric": cfg.get("BACKFILLMETRIC"),
        "node_allocation_policy": alloc,
        "task_distribution": _DISTRIBUTIONS[dist],
        "availability_policy": _availability(cfg.get("NODEAVAILABILITYPOLICY")),
        "weights": {k: cfg.get(_WEIGHT_NAMES.get(k, k)) for k in DEFAULT_WEIGHTS},
        "cred_priority": prio,
        "fs_policy": cfg.get("FSPOLICY"),
        "fs_interval": float(cfg.get("FSINTERVAL")),
        "fs_depth": cfg.get("FSDEPTH"),
        "fs_decay": cfg.get("FSDECAY"),
        "fs_targets": targets,
        "throttles": throttles,
        "modules": cfg.modules,
        "standing_reservations": _standing(cfg),
    }
