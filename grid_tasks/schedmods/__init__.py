"""Concrete scheduler modules of the Java Maui (seed 004), outside the pure core.

Importing this package registers ``logger`` (log rotation and compression),
``jobchecker`` (accounting, purge, retry of deferred jobs) and ``profiler`` (disk,
broker and database health) in :data:`grid_tasks.maui.modules.MODULES`, so a maui.cfg
line ``MODULES logger jobchecker profiler`` names them.

The modules observe the pure core; the shell calls them (the core never does).  The
live iteration builds them explicitly::

    cfg = load_maui_config(policy_file)
    ctx = ModuleContext.from_settings(settings, rm="rmA", config=cfg)  # or ModuleContext(...)
    config, modules = scheduler_parts(cfg, ctx)        # config.modules emptied
    sched = Scheduler(nodes, config=config)
    observers = Observers(modules)
    observers.started(sched)
    result = observers.iterate(sched, now)             # core first, then every module

or by name from the registry, ``Observers(config.modules)`` inside ``with use_context(ctx): ...``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from grid_tasks.maui import SchedulerConfig
from grid_tasks.maui.cfgbridge import scheduler_config
from grid_tasks.maui.modules import MODULES, SchedModule, build_modules
from grid_tasks.schedmods.context import (
    ModuleContext,
    ProfilerThresholds,
    current_context,
    set_default_context,
    use_context,
)
from grid_tasks.schedmods.jobchecker import (
    CheckReport,
    DeferPolicy,
    JobChecker,
    check_jobs,
    defer_job,
)
from grid_tasks.schedmods.logrotate import LoggerModule, RotatingLog, RotatingLogHandler
from grid_tasks.schedmods.profiler import (
    DatabaseCheck,
    DiskCheck,
    Finding,
    ProfileReport,
    RedisCheck,
    Severity,
    SystemProfiler,
)

if TYPE_CHECKING:  # pragma: no cover
    from grid_tasks.maui.cfg import MauiConfig

#: The modules of this package, by maui.cfg name.
CONCRETE = {"logger": LoggerModule, "jobchecker": JobChecker, "profiler": SystemProfiler}


def load_modules(cfg: "MauiConfig", context: ModuleContext) -> list[SchedModule]:
    """Instances of every module ``cfg`` lists (MODULES), in order, on ``context``.

    This package's modules get ``cfg`` and ``context``; other registered names are
    built as the core builds them.  An unknown name raises the core's SchedulerError.
    """
    if context.config is None:
        context = dataclasses.replace(context, config=cfg)
    out: list[SchedModule] = []
    for name in cfg.modules:
        cls = CONCRETE.get(name.lower())
        out.extend([cls(cfg, context)] if cls is not None else build_modules([name]))
    return out


def scheduler_parts(cfg: "MauiConfig", context: ModuleContext) -> tuple["SchedulerConfig", list[SchedModule]]:
    """The SchedulerConfig of ``cfg`` without module names, and the modules built here.

    The config goes to :class:`~grid_tasks.maui.Scheduler`, the modules to an
    :class:`~grid_tasks.maui.modules.Observers` the caller drives; the names stay out
    of the config so nobody builds a second, context-less copy of each module.
    """
    config = dataclasses.replace(scheduler_config(cfg), modules=())
    return config, load_modules(cfg, context)


__all__ = [
    "CONCRETE", "MODULES", "CheckReport", "DatabaseCheck", "DeferPolicy", "DiskCheck",
    "Finding", "JobChecker", "LoggerModule", "ModuleContext", "ProfileReport",
    "ProfilerThresholds", "RedisCheck", "RotatingLog", "RotatingLogHandler", "Severity",
    "SystemProfiler", "check_jobs", "current_context", "defer_job", "load_modules",
    "scheduler_parts", "set_default_context", "use_context",
]
