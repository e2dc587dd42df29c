"""Pluggable scheduler modules, after the Java Maui's SchedListener: observers that the
shell calls around the pure core.

A module is any object with ``on_start(scheduler)``, ``on_iteration(scheduler, result)``
and ``on_shutdown(scheduler)``; :class:`SchedModule` gives no-op defaults, as
dramatiq's middleware base does, so a module overrides only the hooks it needs.
Configurations list modules by name; the registry maps each name to its class.
Register your own with ``@register_module("name")``.

The core never calls a hook: modules do SQL, disk and Redis work, and
:meth:`Scheduler.iterate <grid_tasks.maui.Scheduler.iterate>` must stay free of effects.
The shell (the live iteration, the simulator, a test) holds an :class:`Observers`
and calls it after the core has returned, with the core's own result object.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from grid_tasks.maui.model import IterationResult, SchedulerError

if TYPE_CHECKING:  # pragma: no cover
    from grid_tasks.maui.scheduler import Scheduler

HOOKS = ("on_start", "on_iteration", "on_shutdown")


class SchedModule:
    """Base class: every hook does nothing."""

    name = "base"

    def on_start(self, scheduler: "Scheduler") -> None:
        """Called once by the shell when the scheduler it observes is ready."""

    def on_iteration(self, scheduler: "Scheduler", result: IterationResult) -> None:
        """Called by the shell after every iteration, with that iteration's decisions."""

    def on_shutdown(self, scheduler: "Scheduler") -> None:
        """Called once by the shell when it stops using the scheduler."""


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
        elif all(hasattr(item, h) for h in HOOKS):
            out.append(item)  # type: ignore[arg-type]
        else:
            raise SchedulerError(f"{item!r} is not a scheduler module (needs on_start/on_iteration/on_shutdown)")
    return out


class Observers:
    """The modules observing one scheduler, in order; the shell calls them.

    Keeping the calls here (rather than in the core) means a module that raises
    cannot change what the core decided: the result object is complete before any
    module sees it, and the shell decides what a module's failure means (the live
    iteration lets it roll the transaction back, as before).
    """

    def __init__(self, modules: Iterable[object] = ()) -> None:
        self.modules: list[SchedModule] = build_modules(modules)

    def __iter__(self) -> Iterator[SchedModule]:
        return iter(self.modules)

    def __len__(self) -> int:
        return len(self.modules)

    def started(self, scheduler: "Scheduler") -> None:
        for mod in self.modules:
            mod.on_start(scheduler)

    def iterated(self, scheduler: "Scheduler", result: IterationResult) -> None:
        for mod in self.modules:
            mod.on_iteration(scheduler, result)

    def shutdown(self, scheduler: "Scheduler") -> None:
        for mod in self.modules:
            mod.on_shutdown(scheduler)

    def iterate(self, scheduler: "Scheduler", now: float) -> IterationResult:
        """The shell's usual step: the core's iteration, then every module on its result."""
        result = scheduler.iterate(now)
        self.iterated(scheduler, result)
        return result


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
