"""``grid-tasks showq``: the queue as Maui shows it (logic in :mod:`grid_tasks.ops.queue`).

In a module of its own so that it imports only what showq needs: SQL rows, the kept
plan digest and the table, not the Maui core (unless no fresh plan is kept) or the
RSL parser (start-up time; see :mod:`grid_tasks.cli.opsbase`).
"""

from __future__ import annotations

import json
from typing import Any

import click

from grid_tasks.cli.console import wide_console
from grid_tasks.cli.opsbase import json_option, ops_shell, rm_option
from grid_tasks.ops.queue import barrier_entries, build_queue
from grid_tasks.ops.render import queue_view

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
        click.echo(json_document(queue.to_dict()))
        return
    wide_console(minimum=120).print(queue_view(queue))


def json_document(data: dict[str, Any]) -> str:
    """``data`` as indented JSON with one list item (one job) per line.

    ``json.dumps(..., indent=2)`` runs Python's own encoder (only unindented JSON gets
    the C one): at 100,000 jobs that took most of ``showq --json``'s time.  Each item
    here is encoded by the C encoder and the lists laid out around them."""
    parts = []
    for key, value in data.items():
        if isinstance(value, list) and value:
            body = ",\n".join("    " + json.dumps(item) for item in value)
            text = f"[\n{body}\n  ]"
        else:
            text = json.dumps(value, indent=2).replace("\n", "\n  ")
        parts.append(f"  {json.dumps(key)}: {text}")
    return "{\n" + ",\n".join(parts) + "\n}" if parts else "{}"
