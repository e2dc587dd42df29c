"""Pluggable scheduler modules, after the Java Maui's SchedListener.

A module is any object with ``on_start(scheduler)``, ``on_iteration(scheduler, result)``
and ``on_shutdown(scheduler)``.  Configurations list modules by name; the registry maps
each name to its class.  Register your own with ``@register_module("name")``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable

from grid_tasks.maui.model import IterationResult, SchedulerError

if TYPE_CHECKING:  # pragma: no cover
    from grid_tasks.maui.scheduler import Scheduler


class SchedModule:
    """Base class: every hook does nothing."""

    name = "base"

    def on_start(self, scheduler: "Scheduler") -> None:
        """Called once when the scheduler is built."""

    def on_iteration(self, scheduler: "Scheduler", result: IterationResult) -> None:
        """Called at the end of every iteration with its decisions."""

    def on_shutdown(self, scheduler: "Scheduler") -> None:
        """Called once from ``Scheduler.shutdown``."""


MODULES: dict[str, type[SchedModule]] = {}


def register_module(name: str) -> Callable[[type[SchedModule]], type[SchedModule]]:
    """Class decorator adding a module to the registry under ``name`` (case-insensitive)."""

    def deco(cls: type[SchedModule]) -> type[SchedModule]:
        cls.name = name.lower()
        MODULES[name.lower()] = cls
        return cls

    return deco


def build_modules(items: Iterable[object]) -> list[SchedModule]:
    """Instances for a mix of registry names and ready-made module objects."""
    out: list[SchedModule] = []
    for item in items:
        if isinstance(item, str):
            cls = MODULES.get(item.lower())
            if cls is None:
                raise SchedulerError(f"unknown scheduler module {item!r}; known: {', '.join(sorted(MODULES))}")
            out.append(cls())
        elif all(hasattr(item, h) for h in ("on_start", "on_iteration", "on_shutdown")):
            out.append(item)  # type: ignore[arg-type]
        else:
            raise SchedulerError(f"{item!r} is not a scheduler module (needs on_start/on_iteration/on_shutdown)")
    return out


@register_module("statistics")
class Statistics(SchedModule):
    """Counts iterations, starts, backfilled starts and reservation changes (showstats)."""

    def __init__(self) -> None:
        self.iterations = 0
        self.started = 0
        self.backfilled = 0
        self.reservations = 0
        self.running = False

    def on_start(self, scheduler: "Scheduler") -> None:
        self.running = True

    def on_iteration(self, scheduler: "Scheduler", result: IterationResult) -> None:
        self.iterations += 1
        self.started += len(result.started)
        self.backfilled += result.backfilled
        self.reservations += len(result.reservations_created)

    def on_shutdown(self, scheduler: "Scheduler") -> None:
        self.running = False
