"""Maui's ``showstats`` (accounting, current and per period) and ``diagnose`` (priorities,
why jobs wait, nodes, reservations, fairshare)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.console import Group

from grid_tasks.cli.opsbase import emit, json_option, ops_shell, rm_option
from grid_tasks.legion.tokens import TokenStore
from grid_tasks.ops import OpsError, diagnose_jobs, diagnose_priority, parse_time, show_stats
from grid_tasks.ops.common import scheduled_rms
from grid_tasks.ops.diag_fs import diagnose_fairshare
from grid_tasks.ops.diag_nodes import diagnose_nodes
from grid_tasks.ops.diag_res import diagnose_reservations
from grid_tasks.ops.render import diagnosis_view, priority_view
from grid_tasks.ops.render_diag import fairshare_view, nodes_diag_view, res_diag_view
from grid_tasks.ops.render_stats import history_view, plot_format, plot_history, stats_view
from grid_tasks.ops.stats_history import PERIODS, show_history


@click.command()
@click.option("-u", "by", flag_value="user", help="One line per user.")
@click.option("-g", "by", flag_value="group", help="One line per group.")
@click.option("-a", "by", flag_value="account", help="One line per account.")
@click.option("--by-rm", "by", flag_value="rm", help="One line per resource manager.")
@rm_option()
@click.option("--since", metavar="TIME", help="Only jobs ended since TIME: -DURATION (-1d: the last "
              "day), HH:MM_MO/DD (UTC) or ISO 8601.")
@click.option("--history", type=click.Choice(PERIODS), metavar="|".join(PERIODS),
              help="The same figures per period (UTC days, weeks from Monday, months), with "
              "utilization; default range: the last 7 days, 8 weeks or 6 months.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Draw processor-hours and utilization per period into FILE, in the format "
              "its extension names (.png, .svg, .pdf...; implies --history day unless given).")
@json_option
def showstats(by: str | None, rm: str | None, since: str | None, history: str | None,
              plot: Path | None, as_json: bool) -> None:
    """Usage statistics from the accounting records: jobs (done, failed), processor-hours,
    mean queue wait and expansion factor, plus what runs now; per credential rows show
    the fairshare usage each RM's scheduler computes (decayed over FSDEPTH windows of
    FSINTERVAL) next to its target.

    \b
    Examples:
      grid-tasks showstats -u
      grid-tasks showstats --by-rm --since -7d
      grid-tasks showstats --history week -u --json
      grid-tasks showstats --history day --by-rm --plot usage.png
    """
    if plot is not None:
        plot_format(plot)  # refuse x.txt before any work
        history = history or "day"
    with ops_shell() as shell, shell.session() as session:
        now = shell.now()
        start = parse_time(since, now, option="--since") if since else None
        if history is None:
            stats = show_stats(session, by=by, rm=rm, since=start, now=now)
        else:
            found = show_history(session, now, period=history, by=by, rm=rm, since=start)
    if history is None:
        emit(stats.to_dict(), as_json, stats_view(stats))
        return

    if plot is not None:
        plot_history(found, plot)
        click.echo(f"plot written to {plot}", err=True)
    emit(found.to_dict(), as_json, history_view(found))


@click.command()
@click.option("-p", "priority", is_flag=True, help="Priority breakdown of every idle job.")
@click.option("-j", "jobs", is_flag=True, help="Why jobs (or JOB) do not start.")
@click.option("-n", "nodes", is_flag=True, help="Nodes (or NODE): state, processors, heartbeat, "
              "problems.")
@click.option("-f", "fairshare", is_flag=True, help="Fairshare per credential: windows, decayed "
              "usage, target, priority component.")
@click.option("-r", "res", is_flag=False, flag_value="", default=None, metavar="[RES]",
              help="Reservations (or RES): window, nodes, ACL, job, token, problems.  With -p "
              "or -j, -r RM names the resource manager (as before).")
@click.option("--rm", "rm", metavar="RM",
              help="Resource manager (cluster) to look at; default all.")
@click.argument("target", required=False, metavar="[JOB|NODE|RES]")
@json_option
def diagnose(priority: bool, jobs: bool, nodes: bool, fairshare: bool, res: str | None,
             rm: str | None, target: str | None, as_json: bool) -> None:
    """Diagnose the scheduler: ``-p`` each idle job's priority and weighted components;
    ``-j [JOB]`` why jobs do not start; ``-n [NODE]`` node state, processors configured/
    dedicated/reserved/available, heartbeat age and problems (stale heartbeat,
    over-allocation, jobs on a node that is down); ``-r [RES]`` reservations with their
    problems (expired, overlapping, overcommitting, leaked grid token); ``-f`` fairshare.

    \b
    Examples:
      grid-tasks diagnose -p --rm rmA
      grid-tasks diagnose -j 17
      grid-tasks diagnose -n node3
      grid-tasks diagnose -r --rm rmA --json
      grid-tasks diagnose -f
    """
    if (priority or jobs) and res:
        rm, res = rm or res, None  # the historical `diagnose -p -r RM`
    mode = _mode(priority, jobs, nodes, fairshare, res is not None)
    if mode == "res" and res and target:
        raise OpsError("give the reservation once: diagnose -r RES")
    target = target or res or None
    if target and mode in ("priority", "fairshare"):
        raise OpsError(f"diagnose -{mode[0]} takes no argument (got {target!r})")
    with ops_shell() as shell, shell.session() as session:
        data, view = _RUN[mode](shell, session, target, rm)
    emit(data, as_json, view)


def _mode(priority: bool, jobs: bool, nodes: bool, fairshare: bool, res: bool) -> str:
    chosen = [name for name, on in (("priority", priority), ("jobs", jobs), ("nodes", nodes),
                                    ("fairshare", fairshare), ("res", res)) if on]
    if len(chosen) != 1:
        raise OpsError("give exactly one of -p (priorities), -j [JOB] (why jobs wait), "
                       "-n [NODE] (nodes), -r [RES] (reservations) or -f (fairshare)")
    return chosen[0]


def _priority(shell: Any, session: Any, _target: str | None, rm: str | None) -> tuple[Any, Any]:
    now, registry = shell.now(), shell.registry()
    names = scheduled_rms(session, rm)
    found = {n: diagnose_priority(session, n, now, registry=registry) for n in names}
    data = {n: [r.to_dict() for r in rows] for n, rows in found.items()}
    return data, Group(*[priority_view(n, rows) for n, rows in found.items()])


def _jobs(shell: Any, session: Any, target: str | None, rm: str | None) -> tuple[Any, Any]:
    rows = diagnose_jobs(session, shell.now(), job=target, rm=rm, registry=shell.registry())
    return [d.to_dict() for d in rows], diagnosis_view(rows)


def _nodes(shell: Any, session: Any, target: str | None, rm: str | None) -> tuple[Any, Any]:
    rows = diagnose_nodes(session, shell.now(), node=target, rm=rm, registry=shell.registry())
    return [d.to_dict() for d in rows], nodes_diag_view(rows)


def _reservations(shell: Any, session: Any, target: str | None,
                  rm: str | None) -> tuple[Any, Any]:
    now = shell.now()
    rows = diagnose_reservations(session, now, name=target, rm=rm, tokens=_token_lookup(shell))
    return [d.to_dict(now) for d in rows], res_diag_view(rows, now)


def _token_lookup(shell: Any) -> Any:
    """The token store's ``get``, or None when Redis does not answer."""
    if shell.registry() is None:
        return None

    settings = shell.settings
    return TokenStore.from_url(settings.redis_url, settings=settings).get


def _fairshare(shell: Any, session: Any, _target: str | None, rm: str | None) -> tuple[Any, Any]:
    reports = diagnose_fairshare(session, shell.now(), rm=rm)
    return [r.to_dict() for r in reports], fairshare_view(reports)


_RUN = {"priority": _priority, "jobs": _jobs, "nodes": _nodes, "res": _reservations,
        "fairshare": _fairshare}
