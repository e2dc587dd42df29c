"""``grid-tasks coalloc``: DUROC coallocated jobs (submit, add, delete, release, cancel, states)."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click
from rich.table import Table

from grid_tasks.cli.console import wide_console
from grid_tasks.cli.nodes import resolve_settings
from grid_tasks.cli.submit import _read_rsl, cancel_on_interrupt
from grid_tasks.client import Grid
from grid_tasks.events import read_output
from grid_tasks.gram.errors import WaitTimeoutError

EPILOG = """\b
Examples:
  grid-tasks coalloc submit -f job.rsl            # '+(&(resourceManagerContact=rmA)...)(...)'
  grid-tasks coalloc submit --wait -f job.rsl     # follow until DONE/FAILED
  grid-tasks coalloc submit -s -f job.rsl         # and print each subjob's output
  grid-tasks coalloc submit '+(&(count=2)...)(&(resourceManagerContact=rmB)...)'  # placed
  grid-tasks coalloc states 3 --json
  grid-tasks coalloc add 3 '+(&(resourceManagerContact=rmB)(label=extra)...)'
  grid-tasks coalloc delete 3 extra
  grid-tasks coalloc release 3 --no-wait
  grid-tasks coalloc cancel duroc://coalloc/3
"""


def _grid() -> Any:
    return Grid(resolve_settings(None))  # the running grid, from any directory


def _show(status: Any, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(status.to_dict(), indent=2))
        return
    table = Table(title=f"{status.contact}  {status.state.value}  barrier {status.barrier}"
                  + (f"  ({status.reason})" if status.reason else ""))
    for name in ("label", "addr", "rm", "start", "comms", "size", "in barrier", "gram job",
                 "state", "reason"):
        table.add_column(name)
    for s in status.subjobs:
        table.add_row(s.label, str(s.address), s.rm, s.start_type.value, s.comms_type.value,
                      str(s.size), "-" if s.entered is None else str(s.entered),
                      "-" if s.gram_job is None else str(s.gram_job), s.state.value,
                      s.reason or "")
    wide_console().print(table)
    for note in getattr(status, "notes", ()):
        click.echo(note)


@click.group(epilog=EPILOG)
def coalloc() -> None:
    """Coallocated (DUROC) jobs: one GRAM subjob per component of a '+' multi-request,
    released together through a start barrier.

    Submit, add, delete, release and cancel are signed requests to the scheduler
    (`grid-tasks worker --scheduler`): the job belongs to whoever signed the submit,
    and with a grid map only its owner may change or cancel it."""


@coalloc.command()
@click.argument("rsl", required=False)
@click.option("-f", "--file", "file", metavar="FILE", help="Read the RSL from FILE ('-': stdin).")
@click.option("--barrier-timeout", type=click.FloatRange(min=0.1), default=300.0,
              show_default=True, help="Seconds before an incomplete barrier fails the job.")
@click.option("--wait/--no-wait", default=False, help="Follow the job until it ends.")
@click.option("-s", "--stream", is_flag=True,
              help="Follow the job, printing each subjob's stdout/stderr as '[label] line' "
                   "(implies --wait; Ctrl-C cancels the job).")
@click.option("--timeout", type=click.FloatRange(min=0), help="With --wait: give up after.")
@click.option("--coreserve/--no-coreserve", default=None,
              help="Co-reserve every subjob with one common start through the broker first "
                   "[default: only when a component has no resourceManagerContact].")
@click.option("--allow-early", is_flag=True,
              help="With a co-reservation: subjobs may start before it if resources are free.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def submit(rsl: str | None, file: str | None, barrier_timeout: float, wait: bool,
           stream: bool, timeout: float | None, coreserve: bool | None, allow_early: bool,
           as_json: bool) -> None:
    """Submit a multi-request; prints its contact (and, with --wait, its end).

    Components without resourceManagerContact are placed by the broker, which
    co-reserves every subjob so that all start together (see --coreserve)."""
    text, source = _read_rsl(rsl, file)
    wait = wait or stream
    with _grid() as grid:
        job = grid.job_request(text, barrier_timeout=barrier_timeout, source=source,
                               coreserve=coreserve, allow_early=allow_early)
        if stream:
            click.echo(job.contact, err=True)  # first, as submit -s prints the GRAM contact
        try:
            status = (_follow(grid, job, timeout) if stream
                      else job.wait(timeout) if wait else job.status())
        except KeyboardInterrupt:
            cancel_on_interrupt(job.cancel, job.contact)
        co = getattr(job, "coreservation", None)
        if co is not None and as_json:
            click.echo(json.dumps({**status.to_dict(), "coreservation": co.to_dict()},
                                  indent=2))
        else:
            if co is not None:
                click.echo(f"co-reserved on {', '.join(co.rms)} from "
                           f"{co.to_dict()['start_iso']} ({co.job_key})")
            _show(status, as_json)
        if wait and status.state.value == "FAILED":
            raise SystemExit(1)


#: Seconds between two looks at a streamed job's subjobs (a request to the scheduler).
POLL_S = 0.3


def _follow(grid: Any, job: Any, timeout: float | None) -> Any:
    """Copy every subjob's output here, each line prefixed with its label, until the
    job has ended and its subjobs' output is all printed; its last snapshot."""
    deadline = None if timeout is None else time.monotonic() + timeout
    after: dict[int, str] = {}
    while True:
        status = job.status()
        _copy_output(grid, status, after)
        if status.state.terminal:
            time.sleep(POLL_S)  # the last lines of a process that has just ended
            _copy_output(grid, status, after)
            return status
        if deadline is not None and time.monotonic() > deadline:
            raise WaitTimeoutError(f"{job.contact} still {status.state.value} after "
                                   f"{timeout:g} s", status)
        time.sleep(POLL_S)


def _copy_output(grid: Any, status: Any, after: dict[int, str]) -> None:
    """New output lines of every subjob with a GRAM job since ``after`` (per GRAM job)."""
    for sub in status.subjobs:
        if sub.gram_job is None:
            continue
        for line in read_output(grid.redis, sub.gram_job, after.get(sub.gram_job, "0-0")):
            after[sub.gram_job] = line.id
            target = sys.stdout if line.stream == "stdout" else sys.stderr
            target.write(f"[{sub.label}] {line.text}")
            target.flush()


@coalloc.command()
@click.argument("job")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def states(job: str, as_json: bool) -> None:
    """Show the job's state, barrier and every subjob (the DUROC snapshot)."""
    with _grid() as grid:
        _show(grid.subjob_states(job), as_json)


@coalloc.command()
@click.argument("job")
@click.argument("rsl", required=False)
@click.option("-f", "--file", "file", metavar="FILE", help="Read the RSL from FILE ('-': stdin).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def add(job: str, rsl: str | None, file: str | None, as_json: bool) -> None:
    """Add subjob(s) before the barrier is released; they join the same barrier."""
    text, _ = _read_rsl(rsl, file)
    with _grid() as grid:
        labels = grid.subjob_add(job, text)
        if as_json:
            click.echo(json.dumps({"added": labels}))
        else:
            click.echo("added " + ", ".join(labels))


@coalloc.command()
@click.argument("job")
@click.argument("label")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def delete(job: str, label: str, as_json: bool) -> None:
    """Delete a subjob before release (its GRAM job is cancelled)."""
    with _grid() as grid:
        _show(grid.subjob_delete(job, label), as_json)


@coalloc.command()
@click.argument("job")
@click.option("--wait/--no-wait", "wait_for_subjobs", default=True, show_default=True,
              help="Wait for every barrier subjob to be in (else refuse if some are not).")
@click.option("--timeout", type=click.FloatRange(min=0), help="Seconds to wait at most.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def release(job: str, wait_for_subjobs: bool, timeout: float | None, as_json: bool) -> None:
    """Release the start barrier (normally the job does so itself once all are in)."""
    with _grid() as grid:
        _show(grid.barrier_release(job, wait_for_subjobs, timeout), as_json)


@coalloc.command()
@click.argument("job")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def cancel(job: str, as_json: bool) -> None:
    """Cancel the job at any stage: every subjob on every RM is killed."""
    with _grid() as grid:
        _show(grid.job_cancel(job), as_json)
