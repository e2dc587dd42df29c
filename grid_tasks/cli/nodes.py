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
from grid_tasks.embedded.stack import ENV_FILE, read_env_file
from grid_tasks.errors import NotFoundError
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


def resolve_settings(stack_dir: Path | None) -> Settings:
    """Explicit --stack, else GRID_TASKS_* if Redis is set there, else a running embedded stack."""
    settings = Settings.from_env()
    if stack_dir is not None:
        found = read_env_file(stack_dir / ENV_FILE)
        if found is None:
            raise NotFoundError(f"no running grid in {stack_dir} (no {ENV_FILE})")
        return found
    if "GRID_TASKS_REDIS_URL" in os.environ or "GRID_TASKS_BROKER_URL" in os.environ:
        return settings
    return read_env_file(settings.state_dir / "embedded" / ENV_FILE) or settings


@click.command()
@click.option("--rm", "rm", metavar="RM", help="Only this resource manager's nodes.")
@click.option("--topology", type=click.Path(path_type=Path),
              help="Topology file (default: $GRID_TASKS_TOPOLOGY or config/grid.toml).")
@click.option("--stack", "stack_dir", type=click.Path(path_type=Path),
              help="State dir of a running `grid-tasks up` to read (default: "
                   "<GRID_TASKS_STATE_DIR>/embedded when no GRID_TASKS_REDIS_URL is set).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def nodes(rm: str | None, topology: Path | None, stack_dir: Path | None,
          as_json: bool) -> None:
    """List nodes: state (Idle/Running/Down/Unknown), resources and last heartbeat.

    A node whose daemon stopped heartbeating shows Unknown once its heartbeat
    key expires (GRID_TASKS_HEARTBEAT_TTL); one that shut down cleanly shows Down.
    Redis is found through GRID_TASKS_REDIS_URL, else from a running
    ``grid-tasks up`` (its stack.env).
    """
    settings = resolve_settings(stack_dir)
    if topology is not None:
        settings = settings.replace(topology_file=topology)
    statuses = collect(settings, rm)
    if as_json:
        click.echo(json.dumps([s.to_dict() for s in statuses], indent=2))
        return
    wide_console().print(nodes_table(statuses, time.time()))
