"""The harness starts every case from a healthy grid: nodes recorded in SQL (not only
heartbeating), frozen daemons resumed, dead ones restarted (issue 21, finding 7: a
node frozen before its SQL record, and left down for every later case)."""

from __future__ import annotations

import psutil

from grid_tasks.faults import FaultGrid, until


def test_a_restarted_node_counts_only_once_recorded_in_sql(fault_grid: FaultGrid) -> None:
    fault_grid.ensure_healthy()
    assert fault_grid.unrecorded([("rmB", "node4")]) == []
    fault_grid.kill_node("node4")
    fault_grid.start_node("rmB", "node4", wait=False)
    # its previous daemon's record is older than the new daemon: not ready yet
    assert fault_grid.unrecorded([("rmB", "node4")]) == ["rmB/node4"]
    fault_grid.wait_nodes([("rmB", "node4")])
    assert fault_grid.unrecorded([("rmB", "node4")]) == []


def test_ensure_healthy_resumes_frozen_and_restarts_dead_daemons(fault_grid: FaultGrid) -> None:
    fault_grid.ensure_healthy()
    frozen = fault_grid.freeze("node4")
    until(lambda: psutil.Process(frozen).status() == psutil.STATUS_STOPPED, 5,
          "node4's daemon stopped")  # the signal is delivered asynchronously
    fault_grid.kill_node("node3")
    done = fault_grid.ensure_healthy()
    assert "resumed node4" in done and "restarted node3" in done
    assert psutil.Process(frozen).status() != psutil.STATUS_STOPPED
    assert fault_grid.nodes["node3"].alive() and not fault_grid.frozen
    assert fault_grid.unrecorded([("rmB", "node3"), ("rmB", "node4")]) == []
