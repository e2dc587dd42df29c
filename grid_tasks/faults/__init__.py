"""Fault injection against a real grid: the scenarios ``grid-tasks selftest --faults`` and
``tests/faults`` share.  See docs/RELIABILITY.md."""

from grid_tasks.faults.harness import MARKER_ENV, FaultGrid, FaultTimeout, until
from grid_tasks.faults.invariants import Check, Outcome

__all__ = ["MARKER_ENV", "Check", "FaultGrid", "FaultTimeout", "Outcome", "until"]
