"""The GRAM part of ``grid-tasks demo``: a few jobs per demo RM, showq live, their outputs."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from grid_tasks.client import Grid

#: (rm, RSL, what it shows) submitted by the demo, in order.
DEMO_JOBS: tuple[tuple[str, str, str], ...] = (
    ("rmA", "&(executable=/bin/sh)(count=3)(arguments=-c 'echo rank $GRID_TASKS_RANK of "
            "$GRID_TASKS_SIZE on $GRID_TASKS_NODE')", "3 ranks say where they run"),
    ("rmA", "&(executable=/bin/sleep)(arguments=1)(count=8)", "fills rmA for a second"),
    ("rmA", "&(executable=/bin/echo)(arguments=ran after the big job)", "waits Idle, then runs"),
    ("rmB", "&(executable=/bin/sh)(count=2)(arguments=-c 'expr 6 \\* $GRID_TASKS_RANK + 7')",
     "2 ranks compute"),
    ("rmB", "&(executable=/no/such/program)", "fails: EXECUTABLE_NOT_FOUND"),
)


def showq_table(statuses: list[Any], title: str) -> Table:
    """A compact showq: id, RM, GRAM and Maui state, nodes, exit code or reason."""
    table = Table(title=title)
    for col in ("job", "rm", "state", "maui", "nodes", "result"):
        table.add_column(col)
    for s in statuses:
        nodes = ",".join(f"{n}:{t}" for n, t in sorted(s.nodes.items())) or "-"
        result = s.reason if s.state.value == "FAILED" else (
            f"exit {s.exit_code}" if s.exit_code is not None else "")
        table.add_row(str(s.id), s.rm or "-", s.state.value, s.maui_state.value, nodes, result)
    return table


def run_demo_jobs(console: Console, settings: Any, timeout: float = 60.0) -> list[dict[str, Any]]:
    """Submit :data:`DEMO_JOBS`, show their states live until all ended, print outputs."""
    with Grid(settings) as grid:
        handles = [grid.submit(rsl, rm, user="demo") for rm, rsl, _ in DEMO_JOBS]
        deadline = time.monotonic() + timeout
        with Live(console=console, refresh_per_second=8, transient=False) as live:
            while True:
                statuses = [h.status() for h in handles]
                live.update(showq_table(statuses, "GRAM jobs (live showq)"))
                if all(s.terminal for s in statuses) or time.monotonic() > deadline:
                    break
                time.sleep(0.15)
        results = []
        for (rm, _, what), handle, status in zip(DEMO_JOBS, handles, statuses):
            out = handle.output().rstrip()
            why = f": {status.reason}" if status.state.value == "FAILED" else ""
            console.print(f"[bold]job {handle.id}[/] on {rm} ({what}): {status.state.value}{why}")
            for line in out.splitlines():
                console.print(f"    {line}")
            results.append({**status.to_dict(), "output": out})
    return results
