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
"""

from .common import Section, resolve_job
from .diagnose import diagnose_jobs, diagnose_priority
from .jobs import JobFinishedError, cancel_jobs, check_job
from .nodes import check_node
from .planning import show_backfill, show_start
from .queue import build_queue
from .reservations import (
    ReservationError, parse_resources, release_reservations, reservation_rms, set_reservation,
    show_reservations,
)
from .stats import show_stats
from .timefmt import OpsError, TimeFormatError, format_duration, parse_duration, parse_time
from .why import Reason, explain

__all__ = [
    "JobFinishedError", "OpsError", "Reason", "ReservationError", "Section", "TimeFormatError",
    "build_queue", "cancel_jobs", "check_job", "check_node", "diagnose_jobs",
    "diagnose_priority", "explain", "format_duration", "parse_duration", "parse_resources",
    "parse_time", "release_reservations", "reservation_rms", "resolve_job", "set_reservation",
    "show_backfill",
    "show_reservations", "show_start", "show_stats",
]
