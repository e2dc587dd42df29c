"""``grid-tasks metrics``: Prometheus endpoint and a one-shot table."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
from rich.table import Table

from grid_tasks.cli.console import wide_console
from grid_tasks.metrics.collect import collect
from grid_tasks.metrics.exposition import format_value
from grid_tasks.metrics.server import MetricsServer
from grid_tasks.settings import Settings


@click.group()
def metrics() -> None:
    """Prometheus-style metrics: queue depths, jobs, nodes, iterations, reservations.

    \b
    Examples:
      grid-tasks metrics serve                  # http://127.0.0.1:9464/metrics
      grid-tasks metrics serve --bind 0.0.0.0 --port 9464
      grid-tasks metrics show [--json]
    """


def _settings(topology: Path | None) -> Settings:
    if topology is not None:
        os.environ["GRID_TASKS_TOPOLOGY"] = str(topology)
    return Settings.from_env()


_topology = click.option("--topology", type=click.Path(path_type=Path),
                         help="Grid topology (default: $GRID_TASKS_TOPOLOGY or config/grid.toml).")


@metrics.command()
@click.option("--port", type=click.IntRange(0, 65535), default=9464, show_default=True,
              help="TCP port (0: any free port).")
@click.option("--bind", "host", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0 for every interface).")
@_topology
def serve(port: int, host: str, topology: Path | None) -> None:
    """Serve /metrics in the Prometheus text format until Ctrl-C."""
    server = MetricsServer(_settings(topology), host, port)
    click.echo(f"serving {server.url} (Ctrl-C stops)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


@metrics.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one object per family).")
@_topology
def show(as_json: bool, topology: Path | None) -> None:
    """Collect every metric once and print it."""
    families = collect(_settings(topology))
    if as_json:
        click.echo(json.dumps([f.to_dict() for f in families], indent=2))
        return
    table = Table(title="grid_tasks metrics")
    table.add_column("metric", no_wrap=True)
    table.add_column("labels", overflow="fold")
    table.add_column("value", justify="right", no_wrap=True)
    for fam in families:
        for s in fam.samples:
            if fam.type == "histogram" and s.suffix == "_bucket":
                continue  # the table keeps sum and count; --json has the buckets
            labels = " ".join(f"{k}={v}" for k, v in s.labels.items() if v)
            table.add_row(fam.name + s.suffix, labels, format_value(s.value))
    wide_console().print(table)
