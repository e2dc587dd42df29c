"""``grid-tasks selftest``: prove reliability (``--faults``) or security (``--security``)
on a private grid started for the purpose; print what recovered / what was refused."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from grid_tasks.cli.console import wide_console
from grid_tasks.errors import ConfigError
from grid_tasks.faults.invariants import Outcome
from grid_tasks.faults.registry import CASES
from grid_tasks.faults.runner import resolve as resolve_cases, run_cases
from grid_tasks.selftest.registry import ATTACKS
from grid_tasks.selftest.rows import rows_table
from grid_tasks.selftest.runner import resolve as resolve_attacks, run_attacks


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
@click.option("--faults", is_flag=True, help="Inject faults into real processes and check "
              "that the grid recovers (node, job manager, beat, broker, Redis, database, "
              "scheduler lock, load).")
@click.option("--security", is_flag=True, help="Attack the grid as issue 20 did (forged "
              "launches, remote control, untrusted keys, jobs prying on the daemon, "
              "unbounded RSL/MIL, file modes) and check each is refused.")
@click.option("--case", "cases", multiple=True, metavar="NAME",
              help="--faults: run only this case (repeatable). Default: every case.")
@click.option("--attack", "attacks", multiple=True, metavar="NAME",
              help="--security: run only this attack (repeatable). Default: every attack.")
@click.option("--weaken", "weakened", multiple=True, metavar="NAME",
              help="--security: weaken the private grid on purpose first (unsigned-node, "
                   "user-as-scheduler, jobs-as-root), to see the self-test report MISS.")
@click.option("--list", "list_only", is_flag=True, help="List the cases (with --security: "
              "the attacks) and exit.")
@click.option("--state-dir", type=click.Path(path_type=Path), metavar="DIR",
              help="Keep the private grid's logs and database here (default: a temp dir, "
                   "removed afterwards).")
@click.option("--json", "as_json", is_flag=True, help="Print the outcomes as JSON.")
def selftest(faults: bool, security: bool, cases: tuple[str, ...], attacks: tuple[str, ...],
             weakened: tuple[str, ...], list_only: bool, state_dir: Path | None,
             as_json: bool) -> None:
    """Prove reliability or security on a private grid started for the purpose (its own
    Redis, database, scheduler, beats and node daemons - nothing shared is touched).

    --faults: each case starts from a healthy grid (every node heartbeating and
    recorded in SQL) and injects one fault into real processes - node daemon SIGKILL
    mid-launch and mid-job, job manager kill, HA beat kill, broker kill mid-enactment,
    Redis restart, PostgreSQL restart (a private server; skipped without the
    binaries), a daemon frozen past the visibility timeout before and after its launch
    is confirmed, the scheduler killed holding an iteration lock, Redis lost before a
    barrier release, a daemon killed under a 100-job load, a 60 s database outage
    (PostgreSQL stopped; SQLite's disk full, as root) - then, before cleaning up, checks
    the invariants of docs/RELIABILITY.md ("Invariants checked during and after every
    case"; grid_tasks/faults/invariants.py): no lost job, no orphan process, no leaked reservation or
    token, no overcommit, one copy of a rank at a time, each rank run exactly once
    (counted from marks the ranks leave), nothing running after its job ended, and
    each case's recovery target.

    --security: each attack is really performed and its refusal observed: launches
    pushed raw into a node queue (unsigned, user- or node-signed, re-headed), a user's
    remote-control shutdown, a submit signed by an untrusted key, a job reading the
    node daemon's environment or a root-only stdin, exponential RSL and MIL input, the
    modes of state files.  As root, jobs run as a throwaway account (useradd, removed
    after); otherwise the root-only attacks are skipped.

    Exit status 1 if any case did not recover or broke an invariant, or any attack
    got through (MISS).

    \b
    Examples:
      grid-tasks selftest --faults
      grid-tasks selftest --faults --case redis-restart --json
      grid-tasks selftest --security
      grid-tasks selftest --security --attack unsigned-launch --weaken unsigned-node
    """
    if faults and security:
        raise ConfigError("give --faults or --security, not both", source="selftest")
    if security:
        _security(attacks, weakened, list_only, state_dir, as_json)
        return
    if list_only:
        for name, case in CASES.items():
            click.echo(f"{name}: {case.fault}")
        return
    if not faults:
        raise ConfigError("nothing to test: give --faults or --security (or --list)",
                          source="selftest")
    _run_and_report("case", resolve_cases(cases), partial(run_cases, state_dir=state_dir),
                    lambda o: f"{o.case}: {'ok' if o.ok else 'FAILED'}", outcome_table, as_json)


def _security(attacks: tuple[str, ...], weakened: tuple[str, ...], list_only: bool,
              state_dir: Path | None, as_json: bool) -> None:
    """``--security``: list, or run the attacks and print their rows; exit 1 on a miss."""
    if list_only:
        for name, attack in ATTACKS.items():
            click.echo(f"{name}: {attack.expected}")
        return
    _run_and_report("attack", resolve_attacks(attacks),
                    partial(run_attacks, state_dir=state_dir, weakened=weakened),
                    lambda r: f"{r.attack}: {r.verdict}", rows_table, as_json)


def _run_and_report(kind: str, chosen: list[str], run: Callable[..., list[Any]],
                    label: Callable[[Any], str], table: Callable[[list[Any]], Table],
                    as_json: bool) -> None:
    """Run ``chosen`` (cases or attacks) under a status line, print the results as a
    table or JSON, and exit 1 if any is not ok: one shape for both self-tests."""
    console = Console(stderr=True)
    with console.status("starting the private grid") as status:
        results = run(chosen, on_start=lambda name: status.update(
            f"{kind} {name} ({chosen.index(name) + 1}/{len(chosen)})"),
            on_done=lambda r: console.log(label(r)))
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in results], indent=2))
    else:
        wide_console().print(table(results))
    if not all(r.ok for r in results):
        raise SystemExit(1)
