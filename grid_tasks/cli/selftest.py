"""``grid-tasks selftest --faults``: inject faults into a private grid, print what recovered."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from grid_tasks.errors import ConfigError
from grid_tasks.faults.invariants import Outcome


def outcome_table(outcomes: list[Outcome]) -> Table:
    """One row per case: fault, recovered, recovery time, each invariant and its verdict."""
    table = Table(title="fault injection", show_lines=True)
    for column in ("case", "injected fault", "recovered", "recovery", "invariants"):
        table.add_column(column, overflow="fold")
    for o in outcomes:
        checks = "\n".join(f"{'[green]ok[/]' if c.ok else '[red]FAIL[/]'} {c.name}: {c.detail}"
                           for c in o.checks)
        table.add_row(o.case, o.fault, "[green]yes[/]" if o.recovered else "[red]no[/]",
                      "-" if o.recovery_s is None else f"{o.recovery_s:.2f} s",
                      (checks + ("\n" if checks and o.detail else "") + o.detail))
    return table


@click.command()
@click.option("--faults", is_flag=True, help="Run the fault-injection cases (needed today: "
              "the only self-test).")
@click.option("--case", "cases", multiple=True, metavar="NAME",
              help="Run only this case (repeatable). Default: every case.")
@click.option("--list", "list_only", is_flag=True, help="List the cases and exit.")
@click.option("--state-dir", type=click.Path(path_type=Path), metavar="DIR",
              help="Keep the private grid's logs and database here (default: a temp dir, "
                   "removed afterwards).")
@click.option("--json", "as_json", is_flag=True, help="Print the outcomes as JSON.")
def selftest(faults: bool, cases: tuple[str, ...], list_only: bool, state_dir: Path | None,
             as_json: bool) -> None:
    """Prove reliability on a private grid started for the purpose (its own Redis,
    database, scheduler, HA beats and node daemons - nothing shared is touched).

    Each case injects one fault into real processes - node daemon SIGKILL mid-launch and
    mid-job, job manager kill, HA beat kill, broker kill mid-enactment, Redis restart,
    PostgreSQL restart (a private server; skipped without the binaries) - then checks
    DESIGN.md's invariants: no lost job, no orphan process, no leaked reservation or
    token, no overcommit.  Exit status 1 if any case did not recover or broke one.

    \b
    Examples:
      grid-tasks selftest --faults
      grid-tasks selftest --faults --case redis-restart --json
    """
    from grid_tasks.faults.registry import CASES
    from grid_tasks.faults.runner import resolve, run_cases

    if list_only:
        for name, case in CASES.items():
            click.echo(f"{name}: {case.fault}")
        return
    if not faults:
        raise ConfigError("nothing to test: give --faults (or --list)", source="selftest")
    chosen = resolve(cases)
    console = Console(stderr=True)
    with console.status("starting the private grid") as status:
        outcomes = run_cases(
            chosen, state_dir=state_dir,
            on_start=lambda name: status.update(f"case {name} "
                                                f"({chosen.index(name) + 1}/{len(chosen)})"),
            on_done=lambda o: console.log(f"{o.case}: {'ok' if o.ok else 'FAILED'}"))
    if as_json:
        click.echo(json.dumps([o.to_dict() for o in outcomes], indent=2))
    else:
        Console().print(outcome_table(outcomes))
    if not all(o.ok for o in outcomes):
        raise SystemExit(1)
