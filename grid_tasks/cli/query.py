"""``grid-tasks query 'MIL'``: which resources of the grid match a MIL query.

Resources come from the broker's collection (:mod:`grid_tasks.legion.collection`):
live (topology plus node registrations and heartbeats: ``$state``, ``$alive``, ...)
when a grid's Redis is configured (``GRID_TASKS_REDIS_URL``, or a running
``grid-tasks up``) and answers, else the topology file alone (``--grid``, else
``GRID_TASKS_TOPOLOGY``, else ``config/grid.toml``).  Giving ``--grid`` asks about that
file, so it implies the topology unless ``--source live`` is given.  A resource
matches when the query is TRUE for it (UNKNOWN - a missing attribute, a type mismatch -
does not match) and its access rules (``allow_users``/``allow_groups``/``allow_hosts``)
admit the requester.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from grid_tasks.cli.console import wide_console
from grid_tasks.cli.nodes import find_grid
from grid_tasks.embedded.locate import NoRunningGrid
from grid_tasks.errors import ConnectivityError
from grid_tasks.legion.collection import Collection, Requester, Resource, ResourceKind
from grid_tasks.mil import MILError
from grid_tasks.settings import Settings
from grid_tasks.topology import load_topology

_FIXED = ("name", "rm", "procs", "memory", "disk", "swap", "features", "arch", "os", "kind",
          "state", "alive", "active", "host", "last_heartbeat", "nodes", "alive_nodes")


def _read_query(text: str) -> str:
    return sys.stdin.read() if text == "-" else text


def _cell(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return escape(", ".join(str(item) for item in value))
    return "" if value is None else escape(str(value))


def _table(found: list[Resource], total: int, hidden: int, text: str, source: str,
           kind: str, live: bool) -> Table:
    what = {"node": "nodes", "rm": "resource managers", "all": "resources"}[kind]
    note = f"; {hidden} not open to you" if hidden else ""
    table = Table(title=escape(text), caption=f"{len(found)} of {total} {what} match "
                  f"({escape(source)}; sizes in MB{note})")
    columns = ["rm", "node", "procs", "memory", "disk", "swap", "features", "arch", "os"]
    if live:
        columns.insert(2, "state")
    for column in columns + ["other"]:
        numeric = column in ("procs", "memory", "disk", "swap")
        table.add_column(column, justify="right" if numeric else "left",
                         no_wrap=numeric or column in ("rm", "node", "arch", "os", "state"),
                         overflow="fold")
    for res in found:
        a = res.attributes
        other = ", ".join(f"{k}={v}" for k, v in a.items() if k not in _FIXED)
        cells = {"rm": _cell(res.rm),
                 "node": _cell(res.name) if res.kind is ResourceKind.NODE else "(rm)",
                 "state": _cell(a.get("state") if res.kind is ResourceKind.NODE
                                else f"{a.get('alive_nodes', 0)}/{a.get('nodes')} alive")}
        cells.update({c: _cell(a.get(c)) for c in columns if c not in cells})
        table.add_row(*(cells[c] for c in columns), _cell(other))
    return table


def _live_settings(stack_dir: Path | None, source: str) -> Settings | None:
    """Settings of a configured or running grid, or None if there is none (also when
    the grid GRID_TASKS_STATE_DIR names does not run, unless ``--source live`` insists);
    a ``--stack DIR`` where no grid runs is an error."""
    try:
        return find_grid(stack_dir)
    except NoRunningGrid:
        if source == "live" or stack_dir is not None:
            raise
        return None


def _collection(source: str, grid_file: Path | None, stack_dir: Path | None) -> Collection:
    settings = Settings.from_env()
    path = grid_file or settings.topology_file
    topology = load_topology(path)
    if source == "topology" or (source == "auto" and grid_file is not None):
        return Collection(topology)
    live = _live_settings(stack_dir, source)
    if live is None:
        if source == "live":
            raise ConnectivityError("no grid to query live: set GRID_TASKS_REDIS_URL or "
                                    "start one with `grid-tasks up` (or use --stack DIR)")
        return Collection(topology)
    try:
        return Collection.live_from_settings(live, topology)
    except ConnectivityError:
        if source == "live":
            raise
        return Collection(topology)  # auto: a grid that is down still has a topology


def _requester(user: str | None, groups: tuple[str, ...], host: str | None) -> Requester:
    me = Requester.current()
    return Requester(user or me.user, groups or me.groups, host or me.host)


def _payload(found: list[Resource], kind: str) -> list[dict[str, Any]]:
    if kind == "all":
        return [r.to_dict() for r in found]
    return [{k: v for k, v in r.to_dict().items() if k != "kind"} for r in found]


@click.command("query")
@click.argument("mil", metavar="'MIL'")
@click.option("--grid", "grid_file", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Grid topology TOML file "
              "[default: $GRID_TASKS_TOPOLOGY, else config/grid.toml].")
@click.option("--source", type=click.Choice(["auto", "live", "topology"]), default="auto",
              show_default=True, help="live: topology plus node registry and heartbeats; "
              "auto: live when a grid's Redis is configured and answers (and no --grid).")
@click.option("--stack", "stack_dir", type=click.Path(path_type=Path), default=None,
              help="State dir of a running `grid-tasks up` to query live.")
@click.option("--kind", type=click.Choice(["node", "rm", "all"]), default="node",
              show_default=True, help="Query nodes, resource managers, or both.")
@click.option("--user", default=None, help="Ask as this user [default: you].")
@click.option("--group", "groups", multiple=True, help="Ask as a member of this group "
              "(repeatable) [default: your groups].")
@click.option("--host", default=None, help="Ask as submitting from this host "
              "[default: this host].")
@click.option("--json", "as_json", is_flag=True, help="Print the matches as JSON.")
def query(mil: str, grid_file: Path | None, source: str, stack_dir: Path | None, kind: str,
          user: str | None, groups: tuple[str, ...], host: str | None, as_json: bool) -> None:
    """List the grid resources matching a MIL (MESSIAHS Interface Language) query.

    Variables are resource attributes: $name $rm $kind $procs $memory $disk $swap (MB),
    $features (a list: use match()), free-form ones such as $arch and $os, and when
    live $state (Idle/Running/Down/Unknown), $alive, $active and $host.  Resource
    managers add $nodes and $alive_nodes.  Only resources whose allow_users /
    allow_groups / allow_hosts admit you are listed.  Give '-' to read the query from
    standard input.  Examples:

    \b
      grid-tasks query '$procs >= 8 and $memory >= 32768'
      grid-tasks query 'match($features, "^gpu$") or $arch == "x86_64"' --json
      grid-tasks query '$alive and $procs >= 4' --source live
      grid-tasks query '$procs >= 16' --kind rm --user alice --group physics
    """
    text = _read_query(mil)
    collection = _collection(source, grid_file, stack_dir)
    requester = _requester(user, groups, host)
    wanted = None if kind == "all" else kind
    try:
        found = collection.query(text, requester, kind=wanted)
        open_to_you = collection.query("true", requester, kind=wanted)
    except MILError as exc:
        if not as_json:
            raise
        click.echo(json.dumps({"query": text, "error": exc.to_dict()}, indent=2))
        sys.exit(1)
    total = len(collection.resources(wanted))
    if as_json:
        payload = {"query": text, "grid": collection.topology.source,
                   "source": "live" if collection.live else "topology", "kind": kind,
                   "total": total, "count": len(found), "hidden": total - len(open_to_you),
                   "matches": _payload(found, kind)}
        click.echo(json.dumps(payload, indent=2, default=str))
        return
    wide_console().print(_table(found, total, total - len(open_to_you), text,
                           "live" if collection.live else collection.topology.source, kind,
                           collection.live))
