"""``grid-tasks submit``: run a GRAM job, in the spirit of ``globusrun``."""

from __future__ import annotations

import json
import signal
import sys
import time
from typing import Any, NoReturn

import click

from grid_tasks.cli.nodes import resolve_settings
from grid_tasks.client import Grid
from grid_tasks.errors import GridTasksError
from grid_tasks.events import read_output, subscribe
from grid_tasks.gram.errors import JobFinishedError, WaitTimeoutError
from grid_tasks.states import JobState

EPILOG = """\b
Examples:
  grid-tasks submit -r rmA '&(executable=/bin/hostname)(count=2)'
  grid-tasks submit -r rmA -b -f job.rsl        # batch: print the contact, return
  grid-tasks submit -r rmB -s '&(executable=/bin/echo)(arguments=hi)'
  grid-tasks submit -r rmA --json '&(executable=/bin/true)'
"""


def _read_rsl(rsl: str | None, file: str | None) -> tuple[str, str]:
    if (rsl is None) == (file is None):
        raise click.UsageError("give the RSL as an argument or with -f FILE (exactly one)")
    if file is None:
        return rsl or "", "<argument>"
    if file == "-":
        return sys.stdin.read(), "<stdin>"
    try:
        with open(file, encoding="utf-8") as handle:
            return handle.read(), file
    except OSError as exc:
        raise click.BadParameter(f"cannot read {file}: {exc.strerror}", param_hint="-f") from None


@click.command(epilog=EPILOG)
@click.argument("rsl", required=False)
@click.option("-f", "--file", "file", metavar="FILE", help="Read the RSL from FILE ('-': stdin).")
@click.option("-r", "--resource-manager", "rm", metavar="RM",
              help="Resource manager to run on (default: the RSL's resourceManagerContact).")
@click.option("-b", "--batch", is_flag=True, help="Print the job contact and return at once.")
@click.option("-s", "--stream", is_flag=True,
              help="Stream the job's stdout/stderr here while it runs.")
@click.option("--user", help="Credential to run as (default: your login name).")
@click.option("--timeout", type=float, default=None, help="Give up waiting after SECONDS.")
@click.option("--json", "as_json", is_flag=True, help="Print the final status as JSON.")
def submit(rsl: str | None, file: str | None, rm: str | None, batch: bool, stream: bool,
           user: str | None, timeout: float | None, as_json: bool) -> None:
    """Submit a GRAM job described in RSL and follow it to the end.

    Without -b, prints the job contact on stderr (as globusrun does), waits
    until the job is DONE or FAILED, prints its final state (and with -s its
    output as it comes) and exits with the job's exit code (1 if it FAILED).
    Ctrl-C cancels the job, as globusrun does, and exits 130.  Bad RSL, an
    unknown RM or a job that can never run are refused before anything is queued.
    """
    text, source = _read_rsl(rsl, file)
    grid = Grid(resolve_settings(None))  # the running grid, from any directory
    try:
        job = grid.submit(text, rm, user=user, source=source)
        if batch:
            click.echo(json.dumps({"id": job.id, "contact": job.contact}) if as_json
                       else job.contact)
            return
        click.echo(job.contact, err=True)  # first: the handle to cancel or query it by
        try:
            status = _follow(grid, job, timeout) if stream else job.wait(timeout)
        except KeyboardInterrupt:
            cancel_on_interrupt(job.cancel, job.contact)
        _report(status, as_json)
    finally:
        grid.close()
    if status.state is JobState.FAILED:
        sys.exit(1)
    sys.exit(min(255, status.exit_code or 0))


#: Exit status after Ctrl-C (128 + SIGINT), as a shell reports an interrupted command.
INTERRUPTED = 128 + signal.SIGINT


def cancel_on_interrupt(cancel: Any, contact: str | None) -> NoReturn:
    """Ctrl-C while following a job: cancel it (as globusrun does; a second Ctrl-C
    cannot cut the cancel short) and exit 130 saying so."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        cancel()
        click.echo(f"{contact}: interrupted, the job is cancelled", err=True)
    except JobFinishedError:
        click.echo(f"{contact}: interrupted; the job had already ended", err=True)
    except GridTasksError as exc:
        click.echo(f"{contact}: interrupted, but the cancel failed: {exc}", err=True)
    sys.exit(INTERRUPTED)


def _follow(grid: Any, job: Any, timeout: float | None) -> Any:
    """Copy the job's output to our stdout/stderr until it ends."""
    deadline = None if timeout is None else time.monotonic() + timeout
    pubsub = subscribe(grid.redis, job.id)
    after, status = "0-0", job.status()
    try:
        while True:
            for line in read_output(grid.redis, job.id, after, block_ms=200):
                after = line.id
                target = sys.stdout if line.stream == "stdout" else sys.stderr
                target.write(line.text)
                target.flush()
            if status.terminal:
                if not read_output(grid.redis, job.id, after):
                    return status
                continue
            if pubsub.get_message(timeout=0):
                status = job.status()
            if deadline is not None and time.monotonic() > deadline:
                raise WaitTimeoutError(f"job {job.id} still {status.state.value} after "
                                       f"{timeout:g} s", status)
    finally:
        pubsub.close()


def _report(status: Any, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(status.to_dict(), indent=2))
        return
    line = f"{status.contact}: {status.state.value}"
    if status.exit_code is not None:
        line += f" (exit code {status.exit_code})"
    if status.state is JobState.FAILED and status.reason:
        line += f": {status.reason}"
        if status.gram_error:
            line += f" [GRAM error {status.gram_error_code} {status.gram_error}]"
    click.echo(line, err=status.state is JobState.FAILED)
