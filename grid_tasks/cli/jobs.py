"""Maui's job and node commands: ``showq``, ``checkjob``, ``canceljob``, ``checknode``.

The logic lives in :mod:`grid_tasks.ops`; this module only resolves the grid's
settings (GRID_TASKS_* variables, else a running ``grid-tasks up``), opens the
database and prints rich tables or, with ``--json``, JSON for scripts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from grid_tasks.cli.console import wide_console
from grid_tasks.cli.nodes import resolve_settings
from grid_tasks.errors import StorageUnavailable
from grid_tasks.ops import build_queue, cancel_jobs, check_job, check_node, resolve_job
from grid_tasks.ops.common import Section, finished_ids, section_of
from grid_tasks.ops.jobs import ACCEPTED, CANCEL_SETTLE_S, cancel_unchecked, check_coalloc, is_coalloc_ref
from grid_tasks.ops.nodes import find_node
from grid_tasks.ops.plan import load_plan
from grid_tasks.ops.queue import barrier_entries
from grid_tasks.ops.render import coalloc_view, job_view, node_view, queue_view
from grid_tasks.ops.shell import OpsShell

JSON_HELP = "Print JSON for scripts instead of tables."


@contextmanager
def ops_shell() -> Iterator[OpsShell]:
    """The connections of one operator command, closed afterwards."""
    shell = OpsShell(resolve_settings(None))
    try:
        yield shell
    finally:
        shell.close()


def emit(data: Any, as_json: bool, renderable: Any) -> None:
    """``--json``: JSON on stdout; else the rich renderable, as wide as needed."""
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        wide_console(minimum=120).print(renderable)


def rm_option(help_text: str = "Resource manager (cluster) to look at; default all.") -> Any:
    return click.option("-r", "--rm", "rm", metavar="RM", help=help_text)


json_option = click.option("--json", "as_json", is_flag=True, help=JSON_HELP)


#: Rows of each showq section in one page of the table (``--limit``).
PAGE_ROWS = 50


@click.command()
@rm_option()
@click.option("--all", "show_all", is_flag=True,
              help="List every job of every section (a deep queue prints long).")
@click.option("--limit", type=click.IntRange(1), default=PAGE_ROWS, show_default=True,
              metavar="N", help="Rows of each section in one page of the table.")
@click.option("--page", type=click.IntRange(1), default=1, show_default=True, metavar="P",
              help="Which page of each section to list (1 is the first).")
@json_option
def showq(rm: str | None, show_all: bool, limit: int, page: int, as_json: bool) -> None:
    """Show the queue as Maui does: ACTIVE, IDLE and BLOCKED jobs.

    Active jobs (running) are listed by remaining walltime, idle jobs by priority
    then submission, blocked jobs (held, deferred, waiting on a dependency) by
    submission; the summary counts every job, processors and nodes in use.  The
    table lists the first page of each section (--limit rows; --page for the next,
    --all for every row); --json always carries every job.  Priorities come from
    the RM's last plan while it is fresh (at most 60 s old and nothing changed).

    \b
    Examples:
      grid-tasks showq
      grid-tasks showq -r rmA --page 2
      grid-tasks showq --all | grep Hold
      grid-tasks showq -r rmA --json | jq '.summary'
    """
    paged = not (as_json or show_all)
    with ops_shell() as shell, shell.session() as session:
        plans, now = shell.plans(), shell.now()
        queue = build_queue(session, rm, now, barrier_entries(shell.settings),
                            limit=limit if paged else None, page=page if paged else 1,
                            ranking=lambda name: plans.ranking(session, name, now))
    if as_json:
        click.echo(json.dumps(queue.to_dict(), indent=2))
        return
    wide_console(minimum=120).print(queue_view(queue))


@click.command()
@click.argument("job")
@click.option("--no-plan", is_flag=True,
              help="Explain a waiting job from SQL only (skip loading the RM's scheduler).")
@click.option("-c", "--coalloc", "coalloc", is_flag=True,
              help="JOB is the id of a coallocated (DUROC) job.")
@json_option
def checkjob(job: str, no_plan: bool, coalloc: bool, as_json: bool) -> None:
    """Show one job in full: state, credentials, times, nodes, reservations, GRAM error,
    history and, when it waits, why it does not start.

    JOB is a job id or a GRAM job contact; a coallocated job (duroc://coalloc/N,
    coalloc-N, or N with -c) is shown with its barrier and every subjob.
    """
    if coalloc or is_coalloc_ref(job):
        with ops_shell() as shell, shell.session() as session:
            report = check_coalloc(session, job, barrier_entries(shell.settings))
        emit(report.to_dict(), as_json, coalloc_view(report))
        return

    with ops_shell() as shell, shell.session() as session:
        now = shell.now()
        row = resolve_job(session, job)
        plan = None
        waiting = section_of(row, finished_ids(session, row.dependencies or [])) in (
            Section.IDLE, Section.BLOCKED)
        if waiting and not no_plan and row.rm is not None:
            plan = load_plan(session, row.rm, now, registry=shell.registry())
        report = check_job(session, job, now, plan)
    emit(report.to_dict(), as_json, job_view(report))


@click.command()
@click.argument("jobs", nargs=-1, required=True)
@json_option
def canceljob(jobs: tuple[str, ...], as_json: bool) -> None:
    """Cancel jobs (ids or contacts): an idle job fails at once, a running one is killed
    on its nodes.

    The kill is waited for a few seconds, so the state shown is the one the cancel led
    to, or "cancel requested" while the kill is still under way.  Every job is checked first: an unknown or finished job refuses the
    whole command and nothing is cancelled.  While the grid's database is away each
    job's gatekeeper accepts the cancel and applies it when the database is back.
    """
    with ops_shell() as shell:
        try:
            with shell.session() as session:
                done = cancel_jobs(session, shell.grid(), jobs)
        except StorageUnavailable:  # the gatekeeper takes it and applies it later
            done = cancel_unchecked(shell.grid(), jobs)
    if as_json:
        click.echo(json.dumps(done, indent=2))
        return
    for item in done:
        if item["state"] == ACCEPTED:
            click.echo(f"job {item['job_id']}: cancel accepted (the database is away; "
                       "recorded when it is back)")
            continue
        if item["settled"] or item["state"] is None:
            click.echo(f"job {item['job_id']} cancelled (was {item['previous_state']}, "
                       f"now {item['state'] or 'unknown'})")
            continue
        click.echo(f"job {item['job_id']}: cancel requested (was {item['previous_state']}, "
                   f"still {item['state']} after {CANCEL_SETTLE_S:g} s: its processes are "
                   "being killed)")


@click.command()
@click.argument("node")
@rm_option("Resource manager of the node (node names are unique grid-wide).")
@json_option
def checknode(node: str, rm: str | None, as_json: bool) -> None:
    """Show one node: state (from its heartbeat when Redis is reachable), configured,
    dedicated, reserved and available processors, its jobs and reservations."""
    with ops_shell() as shell, shell.session() as session:
        row = find_node(session, node, rm)
        registry = shell.registry()
        live = registry.status(row.rm, row.name) if registry is not None else None
        report = check_node(session, node, shell.now(), rm=rm, live=live)
    emit(report.to_dict(), as_json, node_view(report))
