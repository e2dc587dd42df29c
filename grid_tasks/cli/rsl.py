"""``grid-tasks rsl``: check Globus RSL job requests."""

from __future__ import annotations

import json
import os
import sys

import click
from rich.table import Table

from grid_tasks.cli.console import wide_console
from grid_tasks.rsl import STANDARD_VARIABLES, RSLError, SubjobRequest, deferred_variables, lower
from grid_tasks.settings import rsl_max_substitution


@click.group()
def rsl() -> None:
    """Globus RSL job requests (GRAM and DUROC)."""


def _variables(pairs: tuple[str, ...]) -> dict[str, str]:
    # Standard GRAM variables default to this process's environment, as a
    # job manager would define them for the submitting user; the others a job
    # manager defines (the job's contact...) are stand-ins, defined as at submission.
    variables = deferred_variables()
    variables.update({name: os.environ[name] for name in STANDARD_VARIABLES
                      if name in os.environ})
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"expected NAME=VALUE, got {pair!r}", param_hint="--var")
        variables[name] = value
    return variables


def _read(file: str) -> tuple[bytes, str]:
    if file == "-":
        return sys.stdin.buffer.read(), "<stdin>"
    with open(file, "rb") as handle:
        return handle.read(), file


def _limits(job: SubjobRequest) -> str:
    parts = []
    if job.max_wall_time_s is not None:
        parts.append(f"wall {job.max_wall_time_s // 60} min")
    if job.max_cpu_time_s is not None:
        parts.append(f"cpu {job.max_cpu_time_s // 60} min")
    if job.max_time_s is not None:
        parts.append(f"time {job.max_time_s // 60} min")
    if job.max_memory_mb is not None:
        parts.append(f"mem ≤ {job.max_memory_mb} MB")
    if job.min_memory_mb is not None:
        parts.append(f"mem ≥ {job.min_memory_mb} MB")
    return ", ".join(parts) or "-"


def _show(jobs: list[SubjobRequest], source: str) -> None:
    console = wide_console()
    kind = "multi-request" if len(jobs) > 1 else "job request"
    table = Table(title=f"{source}: valid {kind}, {len(jobs)} subjob(s)")
    for column in ("#", "RM contact", "label", "count", "type", "executable", "start / comms", "limits"):
        table.add_column(column)
    for job in jobs:
        command = " ".join([job.executable, *job.arguments])
        table.add_row(
            str(job.index),
            job.rm_contact or "(broker)",
            job.label or "-",
            str(job.count) + (f" on {job.host_count} hosts" if job.host_count else ""),
            job.job_type,
            command,
            f"{job.start_type.value} / {job.comms_type.value}",
            _limits(job),
        )
    console.print(table)
    for job in jobs:
        if job.requirements:
            console.print(f"[bold]subjob {job.index} requirements:[/bold] {job.requirements}", markup=True)
        console.print(f"[bold]subjob {job.index} GRAM RSL:[/bold] ", markup=True, end="")
        console.print(job.gram_rsl(), markup=False, highlight=False)


@rsl.command("check")
@click.argument("file", default="-", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document instead of tables.")
@click.option(
    "--var",
    "variables",
    multiple=True,
    metavar="NAME=VALUE",
    help="Define a substitution variable (repeatable). HOME, LOGNAME... default to the "
    "environment; the job manager's others ($(GLOBUS_GRAM_JOB_CONTACT)...) stay as written.",
)
@click.pass_context
def check(ctx: click.Context, file: str, as_json: bool, variables: tuple[str, ...]) -> None:
    """Parse, evaluate and GRAM-validate the RSL in FILE ('-' or nothing: stdin).

    Exit 0 and show the lowered subjob request(s) when valid; exit 1 with the
    GRAM error name, message and position (a caret under the spot) when not.
    """
    try:
        data, source = _read(file)
    except OSError as exc:
        raise click.FileError(file, hint=exc.strerror or str(exc)) from None
    try:
        jobs = lower(data, _variables(variables), source=source,
                     max_substitution=rsl_max_substitution())
    except RSLError as exc:
        if not as_json:
            raise  # the CLI root prints it with a caret under the spot, exit 1
        error = {"code": exc.code, "message": exc.message, "line": exc.line, "column": exc.column}
        click.echo(json.dumps({"valid": False, "source": source, "error": error}, indent=2))
        ctx.exit(1)
    if as_json:
        document = {"valid": True, "source": source, "subjobs": [job.to_dict() for job in jobs]}
        click.echo(json.dumps(document, indent=2))
    else:
        _show(jobs, source)
