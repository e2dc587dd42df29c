"""``beat --status``: one schedule line per task and RM, readable on 80 columns."""

from __future__ import annotations

from rich.console import Console

from grid_tasks.cli.beat import schedule_table
from grid_tasks.ha.status import Entry

ITERATE = "grid_tasks.scheduling.tasks.iterate"
WATCH = "grid_tasks.scheduling.tasks.watch_nodes"


def test_each_rm_has_its_own_line_with_its_name() -> None:
    entries = [Entry(f"{task}[{rm}]", task, every, {"rm": rm}, 100.0, 130.0)
               for task, every in ((WATCH, 10.0), (ITERATE, 30.0)) for rm in ("rmB", "rmA")]
    console = Console(width=80, record=True)
    console.print(schedule_table(entries, now=120.0))
    rows = [line for line in console.export_text().splitlines() if "rm" in line]
    cells = [[c.strip() for c in row.split("│")[1:3]] for row in rows]
    assert cells == [["iterate", "rmA"], ["iterate", "rmB"],
                     ["watch_nodes", "rmA"], ["watch_nodes", "rmB"]]
    assert "…" not in console.export_text()
