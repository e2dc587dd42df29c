"""Prometheus-style metrics of a grid.

* :func:`collect` reads queue depths (broker), jobs and reservations (SQL), nodes
  (registry), iteration durations, tokens and beat leadership (Redis);
* :func:`render` writes them in the Prometheus text format;
* :class:`MetricsServer` serves ``/metrics`` over HTTP (``grid-tasks metrics serve``);
* :func:`record_iteration` is what the scheduling iteration calls after each run.
"""

from grid_tasks.metrics.collect import collect
from grid_tasks.metrics.exposition import CONTENT_TYPE, MetricFamily, Sample, render
from grid_tasks.metrics.iteration import IterationStats, read_iterations, record_iteration
from grid_tasks.metrics.server import MetricsServer, start_metrics_server

__all__ = ["CONTENT_TYPE", "IterationStats", "MetricFamily", "MetricsServer", "Sample",
           "collect", "read_iterations", "record_iteration", "render", "start_metrics_server"]
