"""Maui's job and node commands: ``checkjob``, ``canceljob``, ``checknode``
(``showq`` is in :mod:`grid_tasks.cli.showq`).

The logic lives in :mod:`grid_tasks.ops`; this module only resolves the grid's
settings (GRID_TASKS_* variables, else a running ``grid-tasks up``), opens the
database and prints rich tables or, with ``--json``, JSON for scripts.
"""

from __future__ import annotations

import json

import click

from grid_tasks.cli.opsbase import emit, json_option, ops_shell, rm_option
from grid_tasks.errors import StorageUnavailable
from grid_tasks.ops import cancel_jobs, check_job, check_node, resolve_job
from grid_tasks.ops.common import Section, finished_ids, section_of
from grid_tasks.ops.jobs import ACCEPTED, CANCEL_SETTLE_S, cancel_unchecked, check_coalloc, is_coalloc_ref
from grid_tasks.ops.nodes import find_node
from grid_tasks.ops.plan import load_plan
from grid_tasks.ops.queue import barrier_entries
from grid_tasks.ops.render import coalloc_view, job_view, node_view


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
