"""The bridge between replayed jobs and the Maui scheduling core.

The simulator has no scheduling policy of its own: every decision comes from
:class:`grid_tasks.maui.Scheduler`, the same core the live scheduler runs.  A
trace's machine is one pool node of ``P`` processors (SWF records carry
processor counts, not node shapes), and a job is ``procs`` one-processor tasks
with the user estimate as its walltime.
"""

from __future__ import annotations

from pathlib import Path

from grid_tasks.errors import GridTasksError
from grid_tasks.maui import Job, Node, Scheduler, SchedulerConfig
from grid_tasks.maui.cfg import MauiConfig, load_maui_config
from grid_tasks.maui.cfgbridge import scheduler_config
from grid_tasks.maui.modules import Observers
from grid_tasks.sim.conventions import SimJob
from grid_tasks.sim.engine import Cluster, Engine

__all__ = ["POLICIES", "load_config", "read_config", "new_scheduler", "observe_modules", "to_core_job",
           "policy_label"]

POLICIES = ("fcfs", "easy", "conservative")


def load_config(policy: str | None = "easy", config: str | Path | None = None) -> SchedulerConfig:
    """A :class:`SchedulerConfig`: from a ``maui.cfg`` file if given, else a preset.

    Raises the core's typed errors (``SchedulerError``, ``MauiConfigError``) on
    an unknown policy or a bad configuration file.
    """
    return read_config(policy, config)[0]


def read_config(policy: str | None = "easy", config: str | Path | None = None
                ) -> tuple[SchedulerConfig, MauiConfig | None]:
    """:func:`load_config` and the parsed maui.cfg it came from (None for a preset),
    whose lines reports about the configuration cite."""
    if config is not None:
        parsed = load_maui_config(config)
        return scheduler_config(parsed), parsed
    return SchedulerConfig.preset(policy or "easy"), None


def policy_label(policy: str | None, config: str | Path | None) -> str:
    """How a run's policy is named in reports: the preset or the config file's name."""
    return Path(config).name if config is not None else (policy or "easy")


def new_scheduler(procs: int, config: SchedulerConfig, name: str = "c0") -> Scheduler:
    """A Maui core scheduling one pool node of ``procs`` processors."""
    if procs < 1:
        raise GridTasksError(f"cluster {name}: needs at least one processor, got {procs}")
    return Scheduler(nodes=[Node(name=name, procs=procs)], config=config)


def observe_modules(engine: Engine, cluster: Cluster, config: SchedulerConfig) -> Observers | None:
    """The scheduler modules ``config`` names (MODULES), one set per cluster, called by
    the replay after each of the cluster's core iterations (the core never calls them).
    None when the configuration names no module, so a plain replay pays nothing."""
    if not config.modules:
        return None
    observers = Observers(config.modules)
    observers.started(cluster.scheduler)  # type: ignore[arg-type]

    def after(c: Cluster, now: float, result: object) -> None:
        if c is cluster:
            observers.iterated(c.scheduler, result)  # type: ignore[arg-type]

    engine.on_iterate(after)
    return observers


def to_core_job(job: SimJob) -> Job:
    """The core's view of a replayed job: ``procs`` single-processor tasks."""
    return Job(id=job.id, tasks=job.procs, procs_per_task=1, walltime=job.estimate,
               submit_time=job.submit,
               user=str(job.user) if job.user >= 0 else None,
               group=str(job.group) if job.group >= 0 else None,
               job_class=str(job.queue) if job.queue >= 0 else None)
