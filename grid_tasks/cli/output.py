"""``grid-tasks output``: a job's output after the fact, as ``globus-job-get-output``."""

from __future__ import annotations

import json

import click

from grid_tasks.cli.nodes import resolve_settings
from grid_tasks.client import Grid


@click.command()
@click.argument("job")
@click.option("--stderr", "stream", flag_value="stderr", help="Print its stderr instead.")
@click.option("--stdout", "stream", flag_value="stdout", default=True, hidden=True)
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: the job, its state, and each line with its node and rank.")
def output(job: str, stream: str, as_json: bool) -> None:
    """Print the captured stdout (or --stderr) of JOB, an id or GRAM contact.

    The output is what the job's processes wrote, kept by the grid while the job
    runs and after it ends (the last 10,000 lines); a job still running shows what
    it has written so far.  Only the job's owner may read it (with a grid map).

    \b
    Examples:
      grid-tasks output 17
      grid-tasks output gram://rmA/jobs/17 --stderr
      grid-tasks output 17 --json | jq -r '.lines[].text'
    """
    with Grid(resolve_settings(None)) as grid:  # the running grid, from any directory
        handle = grid.job(job)  # NotFoundError / Unauthorized before anything is read
        lines = [line for line in handle.lines() if line.stream == stream]
        state = handle.status().state.value
    if as_json:
        click.echo(json.dumps({
            "job_id": handle.id, "contact": handle.contact, "state": state, "stream": stream,
            "lines": [{"node": x.node, "rank": x.rank, "text": x.text} for x in lines]},
            indent=2))
        return
    click.echo("".join(line.text for line in lines), nl=False)
