"""The scale harness's stand-in for a job manager: the part started and exited at once.

A harness (:mod:`grid_tasks.node.harness`) measuring the grid's shared parts at a
thousand nodes must not fork a thousand jobs' processes on one machine, yet the
gatekeeper and the database must see exactly what a real job produces.  The stand-in
therefore skips only the processes: the launch is claimed as usual (token, cancel,
duplicate checks in :mod:`grid_tasks.gram.tasks`), and the part is reported through
the real report path (:func:`~grid_tasks.gram.report.report_finished`, batched to the
RM's gatekeeper) as a real job manager reports a job whose processes all ended
within :data:`~grid_tasks.gram.jobmanager.QUICK_EXIT_S`: its start time and exit
code 0 per rank in one report, recorded as ACTIVE then DONE.
"""

from __future__ import annotations

import time

from grid_tasks.gram.jobmanager import Part
from grid_tasks.gram.launch import LaunchRequest
from grid_tasks.gram.report import NodeContext, report_finished


def stand_in(ctx: NodeContext, req: LaunchRequest) -> None:
    """Report ``req``'s part as started now and exited 0 on every rank it would run."""
    started = time.time()
    codes = {str(req.rank_offset + i): 0 for i in range(req.process_count())}
    report_finished(ctx, req, Part(codes, started=started).to_json())
