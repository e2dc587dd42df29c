"""Run fault cases in order on one private grid; every process is gone afterwards."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from grid_tasks.errors import ConfigError
from grid_tasks.faults.harness import FaultGrid
from grid_tasks.faults.invariants import Check, Outcome
from grid_tasks.faults.registry import CASES


def pick(names: Sequence[str] | None, known: Mapping[str, object], what: str,
         option: str) -> list[str]:
    """``names`` without repeats (all of ``known`` by default); ConfigError naming the
    unknown ones (``what``: "fault case", "attack"; ``option``: the flag that named them)."""
    if not names:
        return list(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(f"unknown {what}(s) {', '.join(unknown)}; known: "
                          f"{', '.join(known)}", source=option)
    return list(dict.fromkeys(names))


def resolve(names: Sequence[str] | None) -> list[str]:
    """The cases to run (all by default); ConfigError naming the unknown ones."""
    return pick(names, CASES, "fault case", "--case")


def run_cases(names: Sequence[str] | None = None, *, state_dir: Path | None = None,
              on_start: Callable[[str], None] | None = None,
              on_done: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Run ``names`` (all by default) on one fresh grid under ``state_dir`` (a temp dir).

    Each outcome also checks that no process of the grid survived the final teardown
    (a ``no leftover process`` check added to the last case).
    """
    chosen = resolve(names)
    temp = state_dir is None
    base = Path(tempfile.mkdtemp(prefix="grid-tasks-faults-")) if temp else Path(state_dir)
    outcomes: list[Outcome] = []
    try:
        fg = FaultGrid(base / "grid").start()
        try:
            for name in chosen:
                if on_start:
                    on_start(name)
                outcome = CASES[name]().run(fg)
                outcomes.append(outcome)
                if on_done:
                    on_done(outcome)
        finally:
            left = fg.stop()
        if outcomes:
            outcomes[-1].checks.append(Check("no leftover process", not left,
                                             f"survivors: {left}" if left
                                             else "grid torn down cleanly"))
    finally:
        if temp:
            shutil.rmtree(base, ignore_errors=True)
    return outcomes
