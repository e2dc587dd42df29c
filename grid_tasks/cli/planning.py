"""Maui's planning commands: ``showstart`` (earliest start) and ``showbf`` (free windows).

A request asked of the whole grid goes through the broker (:mod:`grid_tasks.ops.gridcli`),
which loads Celery: that module is imported only for such a request, so ``showstart JOB``
starts without it (start-up time).
"""

from __future__ import annotations

import click
from rich.console import Group

from grid_tasks.cli.opsbase import emit, json_option, ops_shell, rm_option
from grid_tasks.ops import parse_duration, show_backfill, show_start
from grid_tasks.ops.common import scheduled_rms
from grid_tasks.ops.planning import request_kind
from grid_tasks.ops.render import backfill_view, start_view
from grid_tasks.scheduling.rm_kinds import topology_of


@click.command()
@click.argument("request")
@rm_option("Resource manager to ask (a job's own by default; without it a PROCS@DURATION or "
           "RSL request is asked of every RM).")
@click.option("--alternatives", default=3, show_default=True, type=click.IntRange(1, 10),
              help="How many start/node alternatives to show.")
@json_option
def showstart(request: str, rm: str | None, alternatives: int, as_json: bool) -> None:
    """When could REQUEST start?  REQUEST is a waiting job (id or contact),
    PROCS@DURATION (e.g. 4@2:00:00) or a single-job RSL.

    The answer comes from the RM's Maui scheduler loaded with its current state and
    run once in memory, so higher-priority jobs are placed first.  That plan is kept
    (in the grid's Redis) and reused while fresh: at most 60 s old and nothing of
    the RM changed since (jobs, reservations, nodes, accounting, maui.cfg).

    \b
    Examples:
      grid-tasks showstart 17
      grid-tasks showstart -r rmA 4@30:00
      grid-tasks showstart -r rmB '&(executable=/bin/true)(count=2)(maxWallTime=5)'
      grid-tasks showstart '+(&(executable=a)(count=2))(&(executable=b)(count=4))'

    Without -r a resource request is asked of every RM (through their estimate
    tasks); a multi-request gets the broker's candidate common starts.
    """
    if rm is None and request_kind(request) != "job":
        from grid_tasks.ops.gridcli import showstart_grid  # the broker, Celery: only here

        with ops_shell() as shell:
            data, view = showstart_grid(shell, request, alternatives)
        emit(data, as_json, view)
        return
    with ops_shell() as shell, shell.session() as session:
        plans = shell.plans()
        report = show_start(session, request, shell.now(), rm=rm, registry=plans.registry,
                            limit=alternatives, topology=topology_of(shell.settings.topology_file),
                            plans=plans)
    emit(report.to_dict(), as_json, start_view(report))


@click.command()
@rm_option()
@click.option("-d", "--duration", metavar="DURATION",
              help="Only windows lasting at least this long ([[[DD:]HH:]MM:]SS, 30m, 2h).")
@click.option("-n", "--nodes", "min_nodes", type=click.IntRange(1), metavar="NODES",
              help="Only windows spanning at least this many nodes.")
@json_option
def showbf(rm: str | None, duration: str | None, min_nodes: int | None, as_json: bool) -> None:
    """Show backfill windows: how many processors are free now and for how long,
    without delaying any reservation (priority jobs' included)."""
    min_duration = parse_duration(duration, option="-d") if duration else None
    out, views = {}, []
    with ops_shell() as shell, shell.session() as session:
        now = shell.now()
        plans = shell.plans()
        names = scheduled_rms(session, rm)
        for name in names:
            rows = show_backfill(session, name, now, min_duration=min_duration,
                                 min_nodes=min_nodes, registry=plans.registry, plans=plans)
            out[name] = [w.to_dict() for w in rows]
            views.append(backfill_view(name, rows, now))

    emit(out, as_json, Group(*views))
