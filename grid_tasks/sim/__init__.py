"""Workload simulation: real traces replayed through the Maui core.

* :mod:`~grid_tasks.sim.swf` streams Standard Workload Format traces;
* :mod:`~grid_tasks.sim.conventions` turns records into jobs (``default``, ``pyss``);
* :mod:`~grid_tasks.sim.engine` owns the clock and the event order;
* :mod:`~grid_tasks.sim.replay` wires traces, conventions, cores and the engine;
* :mod:`~grid_tasks.sim.metrics`, :mod:`~grid_tasks.sim.report` and
  :mod:`~grid_tasks.sim.plots` measure and show the result.

Like the rest of the pure core this package never reads the clock and never
imports Celery, Redis or SQLAlchemy; the CLI times the runs.
"""

from grid_tasks.sim.conventions import SimJob, get_convention
from grid_tasks.sim.engine import Engine, SimulationError
from grid_tasks.sim.swf import SWFError, SWFHeader, SWFReader, SWFRecord, read_swf

__all__ = ["Engine", "SimJob", "SimulationError", "SWFError", "SWFHeader", "SWFReader",
           "SWFRecord", "get_convention", "read_swf"]
