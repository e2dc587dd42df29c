"""The operator side of grid_tasks: Maui's commands as plain functions over SQL.

Each function takes a SQLAlchemy session and ``now`` (never reads the clock) and
returns dataclasses with ``to_dict()`` for ``--json``; the CLI modules
(``grid_tasks.cli.jobs``, ``reservations``, ``planning``, ``stats``) only render them.

* queue: :func:`build_queue` (showq)
* jobs: :func:`check_job` (checkjob), :func:`cancel_jobs` (canceljob, via the Grid API)
* nodes: :func:`check_node` (checknode)
* reservations: :func:`set_reservation`, :func:`show_reservations`,
  :func:`release_reservations` (setres, showres, releaseres)
* planning: :func:`show_start`, :func:`show_backfill` (showstart, showbf)
* stats: :func:`show_stats` (showstats); diagnose: :func:`diagnose_priority`,
  :func:`diagnose_jobs` (diagnose -p, -j), explained by :func:`explain`
* timefmt: Maui's time and duration notations

The planning functions load the RM's Maui core through
``grid_tasks.scheduling.state.load_scheduler`` (see :mod:`grid_tasks.ops.plan`).

The names below are loaded from their modules on first use (PEP 562): each operator
command is a new process, and importing every module here (the Maui core, the RSL
parser, the broker) cost ``showq`` most of its start-up.  Import a module of this
package and only it and what it needs is loaded.
"""

from importlib import import_module
from typing import Any

#: public name -> the module of this package that defines it
_EXPORTS: dict[str, str] = {
    "Section": "common", "resolve_job": "common",
    "diagnose_jobs": "diagnose", "diagnose_priority": "diagnose",
    "JobFinishedError": "jobs", "cancel_jobs": "jobs", "check_job": "jobs",
    "check_node": "nodes",
    "show_backfill": "planning", "show_start": "planning",
    "build_queue": "queue",
    "ReservationError": "reservations", "parse_resources": "reservations",
    "release_reservations": "reservations", "reservation_rms": "reservations",
    "set_reservation": "reservations", "show_reservations": "reservations",
    "show_stats": "stats",
    "OpsError": "timefmt", "TimeFormatError": "timefmt", "format_duration": "timefmt",
    "parse_duration": "timefmt", "parse_time": "timefmt",
    "Reason": "why", "explain": "why",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """A public name of the package, importing only the module that defines it."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups skip this function
    return value
