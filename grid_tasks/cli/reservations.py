"""Maui's reservation commands: ``setres``, ``showres``, ``releaseres``."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import click
from sqlalchemy.orm import Session

from grid_tasks.cli.opsbase import emit, json_option, ops_shell, rm_option
from grid_tasks.db import repository
from grid_tasks.gram.door import ask
from grid_tasks.ops import (
    OpsError, parse_duration, parse_time, reservation_rms, show_reservations,
)
from grid_tasks.ops.gridcli import releaseres_grid, setres_grid, showres_grid
from grid_tasks.ops.render import reservations_view
from grid_tasks.reservation_tasks import RELEASE_RESERVATIONS, SET_RESERVATION


def _names(values: tuple[str, ...]) -> list[str]:
    """Repeated options and comma lists alike: ``-u a -u b,c`` -> [a, b, c]."""
    return [n.strip() for v in values for n in v.split(",") if n.strip()]


def _pick_rm(session: Session, rm: str | None, hosts: str = "") -> str:
    """``--rm`` when given; else the only RM, or the RM of the nodes HOSTS names (node
    names are unique grid-wide, so ``setres node1`` needs no --rm)."""
    if rm is not None:
        repository.get_rm(session, rm)
        return rm
    names = [r.name for r in repository.list_rms(session)]
    if len(names) == 1:
        return names[0]
    inferred = _rm_of_hosts(session, hosts)
    if inferred is None:
        raise OpsError(f"give --rm RM (resource managers: {', '.join(names) or 'none'}); "
                       "it is found by itself only when HOSTS names nodes")
    return inferred


def _rm_of_hosts(session: Session, hosts: str) -> str | None:
    """The RM holding every node of ``HOSTLIST`` / ``N@HOSTLIST`` (names or a regex over
    names); None for TASKS==N, ALL, or nodes of no RM; OpsError when they span RMs."""
    listed = hosts.partition("@")[2] if "@" in hosts else hosts
    if not listed or "==" in listed or listed.upper() == "ALL":
        return None
    rm_of = {n.name: n.rm for n in repository.list_nodes(session)}
    wanted = [h.strip() for h in listed.split(",") if h.strip()]
    if not all(h in rm_of for h in wanted):
        try:
            wanted = [n for n in rm_of if re.fullmatch(listed, n)]
        except re.error:
            return None
    rms = sorted({rm_of[h] for h in wanted})
    if len(rms) > 1:
        raise OpsError(f"{hosts} spans resource managers {', '.join(rms)}: a reservation is "
                       "on one (give --rm RM, or setres --grid for a co-reservation)")
    return rms[0] if rms else None


@click.command()
@click.option("--rm", "-p", "rm", metavar="RM",
              help="Resource manager (Maui's partition); found from the nodes when HOSTS "
                   "names nodes, else needed when there are several.")
@click.option("-u", "users", multiple=True, metavar="USERLIST", help="Users admitted.")
@click.option("-g", "groups", multiple=True, metavar="GROUPLIST", help="Groups admitted.")
@click.option("-a", "accounts", multiple=True, metavar="ACCOUNTLIST", help="Accounts admitted.")
@click.option("-c", "classes", multiple=True, metavar="CLASSLIST", help="Classes admitted.")
@click.option("-q", "qos", multiple=True, metavar="QOSLIST", help="QoS admitted.")
@click.option("-s", "start", default="now", show_default=True, metavar="STARTTIME",
              help="HH[:MM[:SS]][_MO[/DD[/YY]]] (UTC), +DURATION, now or ISO 8601.")
@click.option("-e", "end", metavar="ENDTIME", help="End time (same forms as -s).")
@click.option("-d", "duration", metavar="DURATION",
              help="[[[DD:]HH:]MM:]SS, 2h, or INFINITY (the default without -e).")
@click.option("-n", "name", metavar="NAME", help="Reservation name (default USER.N).")
@click.option("-r", "resources", metavar="RESOURCES",
              help="Per-task resources for TASKS==N / N@HOSTS: PROCS=N[,MEM=MB].")
@click.option("--grid", "grid", is_flag=True,
              help="A grid co-reservation across RMs through the broker: HOSTS is then "
                   "N@RM,... / N (anywhere) / an RSL request; needs -d or -e.")
@click.argument("hosts", metavar="TASKS==N | N@HOSTLIST | HOSTLIST")
@json_option
def setres(rm: str | None, users: tuple[str, ...], groups: tuple[str, ...],
           accounts: tuple[str, ...], classes: tuple[str, ...], qos: tuple[str, ...],
           start: str, end: str | None, duration: str | None, name: str | None,
           resources: str | None, grid: bool, hosts: str, as_json: bool) -> None:
    """Reserve resources of an RM for the users, groups, accounts, classes or QoS given.

    HOSTLIST is ALL, node names (a1,a2) or a regex over node names (whole nodes);
    TASKS==N reserves N tasks of -r size anywhere; N@HOSTLIST N tasks on those nodes.
    The reservation is checked against the RM's scheduler (running jobs, other
    reservations): it never overcommits a node.  An iteration is triggered.

    \b
    Examples:
      grid-tasks setres -u alice -d 2:00:00 node1
      grid-tasks setres --rm rmA -g physics -s +1:00:00 -e +3:00:00 -r PROCS=2 TASKS==2
      grid-tasks setres --grid -n big -s +10:00 -d 1:00:00 4@rmA,2@rmB,2
    """
    if end and duration:
        raise OpsError("give -e ENDTIME or -d DURATION, not both")
    if grid:
        _setres_grid(rm, (users, groups, accounts, classes, qos, resources), start, end,
                     duration, name, hosts, as_json)
        return
    acl = {"users": _names(users), "groups": _names(groups), "accounts": _names(accounts),
           "classes": _names(classes), "qos": _names(qos)}
    with ops_shell() as shell:
        now = shell.now()
        begin = parse_time(start, now, option="-s")
        finish = parse_time(end, now, option="-e") if end else None
        if duration:
            seconds = parse_duration(duration, option="-d")
            finish = None if seconds == float("inf") else begin + timedelta(seconds=seconds)
        with shell.session() as session:  # reading which RMs exist
            rm = _pick_rm(session, rm, hosts)
        # the RM's gatekeeper checks, stores and wakes the RM (operators only)
        data = ask(shell.grid().app, SET_RESERVATION, rm, {
            "hosts": hosts, "resources": resources, "start": begin.isoformat(),
            "end": finish.isoformat() if finish else None, "acl": acl, "name": name},
            shadow=f"setres on {rm}")
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(f"reservation '{data['name']}' created on {rm}: {data['procs']} procs on "
               f"{', '.join(sorted(data['procs_by_node']))}"
               + ("" if data["iteration_triggered"]
                  else " (scheduler not reachable: no iteration triggered)"))


def _setres_grid(rm: str | None, acl_options: tuple[Any, ...], start: str, end: str | None,
                 duration: str | None, name: str | None, spec: str, as_json: bool) -> None:
    """setres --grid (logic in grid_tasks.ops.gridcli)."""
    if rm is not None or any(acl_options):
        raise OpsError("setres --grid takes no --rm, ACL or -r option: the broker places "
                       "the parts, and each admits only the job bound to it")
    with ops_shell() as shell:
        now = shell.now()
        begin = parse_time(start, now, option="-s")
        seconds = parse_duration(duration, option="-d") if duration else None
        if end:
            seconds = (parse_time(end, now, option="-e") - max(begin, now)).total_seconds()
        data, text = setres_grid(shell, spec, name=name, start=begin, duration=seconds)
    click.echo(json.dumps(data, indent=2) if as_json else text)


@click.command()
@rm_option()
@click.option("-n", "per_node", is_flag=True, help="One line per node of each reservation.")
@click.option("--grid", "grid", is_flag=True,
              help="Grid co-reservations (broker), each with its per-RM parts.")
@json_option
def showres(rm: str | None, per_node: bool, grid: bool, as_json: bool) -> None:
    """List reservations: administrative (setres), grid (broker) and job reservations,
    including the one every running job holds until its walltime ends."""
    if grid:
        with ops_shell() as shell:
            data, view = showres_grid(shell)
        emit(data, as_json, view)
        return
    with ops_shell() as shell, shell.session() as session:
        now = shell.now()
        rows = show_reservations(session, now, rm)
    emit([r.to_dict(now) for r in rows], as_json, reservations_view(rows, now, per_node))


@click.command()
@click.argument("names", nargs=-1, required=True)
@rm_option("Resource manager of the reservations (needed when a name exists on several).")
@click.option("--grid", "grid", is_flag=True,
              help="Release grid co-reservations by name: every part on every RM.")
@json_option
def releaseres(names: tuple[str, ...], rm: str | None, grid: bool, as_json: bool) -> None:
    """Release administrative reservations by name; their resources become free and the
    RM's scheduler iterates.  All names are checked first: one unknown name releases none."""
    if grid:
        with ops_shell() as shell:
            data, text = releaseres_grid(shell, names)
        click.echo(json.dumps(data, indent=2) if as_json else text)
        return
    with ops_shell() as shell:
        with shell.session() as session:  # which RM holds each name; all checked first
            where = reservation_rms(session, names, rm)
        answers = [ask(shell.grid().app, RELEASE_RESERVATIONS, r, {"names": list(batch)},
                       shadow=f"releaseres on {r}") for r, batch in where.items()]
    released = [(n, a["rm"], a["iteration_triggered"]) for a in answers for n in a["released"]]
    if as_json:
        click.echo(json.dumps([{"name": n, "rm": r, "iteration_triggered": t}
                               for n, r, t in released], indent=2))
        return
    for n, r, _ in released:
        click.echo(f"reservation '{n}' released on {r}")
