"""How a grid reservation looks on a Slurm cluster (pure: no command runs here).

Slurm cannot bind a reservation to one job, only to users and accounts (issue 24's
measured facts), so a grid reservation is bound as tightly as Slurm allows: the mapped
user alone, a name unique per RM and grid reservation (:func:`slurm_name`), and the job
submitted with ``--reservation`` of that name.  Its window covers the whole walltime in
whole minutes (a job longer than its reservation is killed at its end), and seed 002's
early-start choice is Slurm's ``FLEX`` flag, per job: without it no job starts before
the common start, which is what a barrier wants.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

#: Every grid reservation's Slurm name starts so (orphans are found by it).
PREFIX = "gt-"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def slurm_name(rm: str, name: str) -> str:
    """``gt-<rm>-<name>``: unique per RM and grid reservation, in the characters Slurm
    and a shell take as they are (anything else becomes ``_``)."""
    return _UNSAFE.sub("_", f"{PREFIX}{rm}-{name}")


def rm_prefix(rm: str) -> str:
    """The prefix of every Slurm reservation this grid makes for ``rm``."""
    return slurm_name(rm, "")


def flags(allow_early: bool) -> tuple[str, ...]:
    """Slurm flags for a grid reservation: FLEX when its job may start early."""
    return ("FLEX",) if allow_early else ()


@dataclass(frozen=True)
class Window:
    """The Slurm reservation's start (whole seconds, never in the past) and length in
    seconds, covering the grid reservation's whole interval; Slurm rounds the length up
    to whole minutes itself (:func:`grid_tasks.slurm.translate.minutes`)."""

    start: int
    seconds: int


def window(start: float, end: float, now: float) -> Window:
    """The Slurm window for a grid reservation over ``[start, end)`` asked at ``now``:
    a start already past becomes now (Slurm starts it at once), and the cut seconds are
    kept so the window still reaches ``end``."""
    begin = math.floor(max(start, now))
    return Window(begin, max(1, math.ceil(end - begin)))


def listed_names(text: str) -> list[str]:
    """Reservation names in ``scontrol -o show reservation``'s answer (one per line)."""
    found = []
    for line in text.splitlines():
        match = re.match(r"\s*ReservationName=(\S+)", line)
        if match:
            found.append(match.group(1))
    return found
