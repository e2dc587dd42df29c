"""``grid-tasks nodes``: every node of the grid with its state, resources and last heartbeat."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path

import click
from rich.table import Table

from grid_tasks.cli.console import wide_console
from grid_tasks.embedded.locate import LOCK_FILE, NoRunningGrid, grid_running, running_grids
from grid_tasks.embedded.envfile import ENV_FILE, read_env_file
from grid_tasks.node.registry import NodeRegistry, NodeStatus
from grid_tasks.settings import Settings
from grid_tasks.states import NodeState
from grid_tasks.topology import GridTopology, load_topology

STATE_STYLE = {
    NodeState.IDLE: "green", NodeState.RUNNING: "cyan", NodeState.BUSY: "yellow",
    NodeState.DRAINED: "magenta", NodeState.DOWN: "red", NodeState.UNKNOWN: "bold red",
}


def heartbeat_age(last: float | None, now: float) -> str:
    """``'1.2 s ago (21:03:04Z)'``, or ``'never'``."""
    if last is None:
        return "never"
    stamp = datetime.fromtimestamp(last, timezone.utc).strftime("%H:%M:%SZ")
    return f"{max(0.0, now - last):.1f} s ago ({stamp})"


def nodes_table(statuses: list[NodeStatus], now: float, title: str = "grid nodes") -> Table:
    """A rich table of node statuses."""
    table = Table(title=title)
    for col in ("rm", "node", "state", "procs", "memory", "features", "last heartbeat"):
        table.add_column(col, justify="right" if col in ("procs", "memory") else "left")
    for s in statuses:
        style = STATE_STYLE.get(s.state, "")
        table.add_row(s.rm, s.node, f"[{style}]{s.state.value}[/]", _num(s.procs),
                      "-" if s.memory_mb is None else f"{s.memory_mb} MB",
                      ", ".join(s.features) or "-", heartbeat_age(s.last_heartbeat, now))
    return table


def _num(value: int | None) -> str:
    return "-" if value is None else str(value)


def collect(settings: Settings, rm: str | None = None) -> list[NodeStatus]:
    """Node statuses from Redis, completed with the topology's nodes when its file exists."""
    topology: GridTopology | None = None
    if Path(settings.topology_file).exists():
        topology = load_topology(settings.topology_file)
        if rm is not None:
            topology.rm(rm)  # NotFoundError for an unknown RM
    registry = NodeRegistry.from_settings(settings)  # with its TLS options
    found = registry.list_nodes(topology)
    return [s for s in found if rm is None or s.rm == rm]


#: variables that say where a grid is: with any of them set, no running grid is looked for
_CONFIGURED = ("GRID_TASKS_REDIS_URL", "GRID_TASKS_BROKER_URL", "GRID_TASKS_DATABASE_URL")

NO_GRID_HINT = ("start one with `grid-tasks up`, or point at a running one with "
                "`--stack DIR` or GRID_TASKS_STATE_DIR=DIR (the state dir `up` printed), "
                "or set GRID_TASKS_REDIS_URL and GRID_TASKS_DATABASE_URL")


def _running_stack(state_dir: Path) -> Settings | None:
    """The settings of the stack holding ``state_dir`` now, else None (a stack.env left
    by a killed grid is no grid: its lock died with it)."""
    if not grid_running(state_dir):
        return None
    return read_env_file(state_dir / ENV_FILE)


def find_grid(stack_dir: Path | None) -> Settings | None:
    """The grid this command talks to, or None when there is none to find.

    In order: ``--stack DIR``; GRID_TASKS_* variables naming Redis, broker or database;
    GRID_TASKS_STATE_DIR's running stack (the dir itself or its ``embedded/``); the stack
    of the default state dir (``./.state/embedded``); the one grid recorded as running
    by this user (:mod:`grid_tasks.embedded.locate`), from whatever directory.
    Reads only: creates no file and no folder.
    """
    if stack_dir is not None:
        found = _running_stack(stack_dir) or _running_stack(stack_dir / "embedded")
        if found is None:
            raise NoRunningGrid(f"no running grid in {stack_dir} (no grid holds its "
                                f"{LOCK_FILE}); {NO_GRID_HINT}")
        return found
    if any(os.environ.get(name) for name in _CONFIGURED):
        return Settings.from_env()
    settings = Settings.from_env()
    for candidate in (settings.state_dir, settings.state_dir / "embedded"):
        found = _running_stack(candidate)
        if found is not None:
            return found
    if "GRID_TASKS_STATE_DIR" in os.environ:
        raise NoRunningGrid(f"no running grid in GRID_TASKS_STATE_DIR={settings.state_dir}; "
                            f"{NO_GRID_HINT}")
    running = running_grids()
    if len(running) > 1:
        raise NoRunningGrid("several grids run: " + ", ".join(map(str, running)) +
                            "; say which with `--stack DIR` or GRID_TASKS_STATE_DIR=DIR")
    return _running_stack(running[0]) if running else None


def resolve_settings(stack_dir: Path | None) -> Settings:
    """The grid's settings (see :func:`find_grid`); :class:`NoRunningGrid` saying how
    to point at one when there is none."""
    found = find_grid(stack_dir)
    if found is None:
        raise NoRunningGrid(f"no running grid found from {Path.cwd()}: {NO_GRID_HINT}")
    return found


@click.command()
@click.option("--rm", "rm", metavar="RM", help="Only this resource manager's nodes.")
@click.option("--topology", type=click.Path(path_type=Path),
              help="Topology file (default: $GRID_TASKS_TOPOLOGY or config/grid.toml).")
@click.option("--stack", "stack_dir", type=click.Path(path_type=Path),
              help="State dir of a running `grid-tasks up` to read (default: the grid "
                   "GRID_TASKS_* name, else the running one, found from any directory).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def nodes(rm: str | None, topology: Path | None, stack_dir: Path | None,
          as_json: bool) -> None:
    """List nodes: state (Idle/Running/Down/Unknown), resources and last heartbeat.

    A node whose daemon stopped heartbeating shows Unknown once its heartbeat
    key expires (GRID_TASKS_HEARTBEAT_TTL); one that shut down cleanly shows Down.
    Redis is found through GRID_TASKS_REDIS_URL, else from the running
    ``grid-tasks up`` (its stack.env), from whatever directory.
    """
    settings = resolve_settings(stack_dir)
    if topology is not None:
        settings = settings.replace(topology_file=topology)
    statuses = collect(settings, rm)
    if as_json:
        click.echo(json.dumps([s.to_dict() for s in statuses], indent=2))
        return
    wide_console().print(nodes_table(statuses, time.time()))
