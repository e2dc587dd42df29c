"""The DUROC part of ``grid-tasks demo``: one coallocated job across both demo RMs.

Subjobs of 2 processes on rmA and 3 on rmB pass the start barrier together;
every process contributes a value, rank 0 of each subjob gathers its subjob's
values (intra-subjob messages), the rank-0s swap their partial sums
(``bootstrap_subjob_exchange``) and each prints the global result.
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from grid_tasks.client import Grid

PROGRAM = '''\
import json, os
from grid_tasks import runtime

runtime.barrier(timeout=60)                      # nobody runs past here until all are in
rank, size = runtime.intra_subjob_rank(), runtime.intra_subjob_size()
address = int(os.environ["GRID_TASKS_SUBJOB_INDEX"])
value = (10 * address + rank + 1) ** 2           # this process's contribution
if rank:
    runtime.intra_subjob_send(0, "value", str(value).encode())
else:
    values = [value] + [int(runtime.intra_subjob_receive("value", timeout=30))
                        for _ in range(size - 1)]
    mine = {"subjob": os.environ["GRID_TASKS_SUBJOB_LABEL"], "sum": sum(values),
            "processes": size}
    everyone = [json.loads(b) for b in runtime.bootstrap_subjob_exchange(
        json.dumps(mine).encode(), timeout=30)]
    total = sum(p["sum"] for p in everyone)
    parts = " + ".join(f"{p['sum']} ({p['subjob']}, {p['processes']} procs)" for p in everyone)
    print(f"subjob {mine['subjob']}: global sum of squares = {parts} = {total}")
'''


def demo_rsl(program: Path, slurm_rm: str | None = None) -> str:
    """Subjobs on rmA and rmB, and one of 2 srun tasks on ``slurm_rm`` when given."""
    comp = ('(&(resourceManagerContact={rm})(label={label})(count={count})'
            f'(executable="{sys.executable}")(arguments="{program}")(maxWallTime=2))')
    slurm = comp.format(rm=slurm_rm, label="slurm", count=2) if slurm_rm else ""
    return ("+" + comp.format(rm="rmA", label="left", count=2)
            + comp.format(rm="rmB", label="right", count=3) + slurm)


def coalloc_table(status: Any) -> Table:
    table = Table(title=f"coallocated job {status.contact}: {status.state.value}, "
                        f"barrier {status.barrier}")
    for col in ("subjob", "rm", "procs", "in barrier", "gram job", "state"):
        table.add_column(col)
    for s in status.subjobs:
        table.add_row(s.label, s.rm, str(s.size), "-" if s.entered is None else str(s.entered),
                      "-" if s.gram_job is None else str(s.gram_job), s.state.value)
    return table


def run_demo_coalloc(console: Console, settings: Any, workdir: Path,
                     timeout: float = 45.0, slurm_rm: str | None = None) -> dict[str, Any]:
    """Run the coallocated demo job with a live state table; print each subjob's output.
    ``slurm_rm``: also a subjob on that Slurm RM (the demo's optional cluster)."""
    program = workdir / "demo_coalloc.py"
    program.write_text(PROGRAM)
    with Grid(settings) as grid:
        job = grid.job_request(demo_rsl(program, slurm_rm), user="demo",
                               barrier_timeout=timeout)
        deadline = time.monotonic() + timeout
        with Live(console=console, refresh_per_second=8, transient=False) as live:
            while True:
                status = job.status()
                live.update(coalloc_table(status))
                if status.terminal or time.monotonic() > deadline:
                    break
                time.sleep(0.15)
        console.print()
        for sub in status.subjobs:
            if sub.gram_job is not None:
                for line in grid.job(sub.gram_job).output().splitlines():
                    console.print(f"    {line}", highlight=False)
        if status.state.value != "DONE":
            console.print(f"[red]coallocated job {status.state.value}: {status.reason}[/]")

        gc.collect()  # Celery result objects unsubscribe now, while Redis is still up
        return status.to_dict()
