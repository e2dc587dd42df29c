"""The layering of the package: lower layers never import higher ones, no import
cycles, and imports inside functions only where a light process must stay light.

``cli -> client -> broker -> duroc -> scheduling -> gram -> services -> db``, with the
task modules and the operators' tools on top and the pure core (``rsl``, ``mil``,
``maui``, ...) at the bottom.  Read from the sources (:mod:`tests.layering`).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import grid_tasks
from tests.layering import Edge, cycles, edges, module_sources

ROOT = Path(grid_tasks.__file__).resolve().parent

#: Layer of each package or module (the longest matching prefix wins); unlisted: 0,
#: the base every layer may use (errors, settings, security, the pure core, ...).
LAYERS: dict[str, int] = {
    "db": 1, "ha": 1, "node": 1, "schedmods": 1, "effects": 1, "scheduler_queues": 1,
    "legion": 2, "celery_app": 2,
    "services": 3,
    "metrics": 4,
    "gram": 5, "slurm": 5,
    "scheduling": 6,
    "duroc": 7, "runtime": 7,
    "broker": 8, "sim": 8,
    "client": 9,
    "ops": 10, "embedded": 10, "faults": 10, "selftest": 10,
    "cli": 11,
}
#: Task modules sit on top, beside the operators' tools: they compose every layer.
TASK_MODULES = ("gram.tasks", "gram.gatekeeper", "gram.report_tasks", "duroc.tasks",
                "scheduling.tasks", "scheduling.rm_tasks", "node.tasks", "reservation_tasks")
TASK_LAYER = 10

#: The package's own modules imported inside a function, and why each stays there: it
#: keeps a light process light, or reaches what only some installs have.
LOCAL_IMPORTS_ALLOWED: dict[tuple[str, str], str] = {
    ("grid_tasks", "grid_tasks.client"): "the root's public API, made on first use (PEP 562)",
    ("grid_tasks.db", "grid_tasks.db.migrations"): "Alembic only in processes that migrate "
                                                   "(an operator command checks the revision)",
    ("grid_tasks.cli.planning", "grid_tasks.ops.gridcli"): "showstart JOB starts without the "
                                                           "broker and Celery (start-up time)",
    ("grid_tasks.ops.plan_cache", "grid_tasks.ops.plan_replay"): "showq from a kept plan "
                                                                 "never loads the Maui core",
    ("grid_tasks.ops.planning", "grid_tasks.ops.rsl_request"): "showstart JOB never loads "
                                                               "the RSL parser",
    ("grid_tasks.services", "grid_tasks.db"): "SQLAlchemy only in processes that use the "
                                              "database (an application never does)",
    ("grid_tasks.gram.errors", "grid_tasks.rsl"): "node daemons never load the RSL parser",
    ("grid_tasks.cli.worker", "grid_tasks.db"): "node daemons never load SQLAlchemy",
    ("grid_tasks.embedded.database", "grid_tasks.db"): "an install without the database extras",
    ("grid_tasks.duroc.store", "grid_tasks.node.registry"): "a job's runtime stays light",
    ("grid_tasks.duroc.resp", "grid_tasks.security.config"): "ssl only for rediss:// URLs",
    ("grid_tasks.cli.simulate", "grid_tasks.sim"): "the plots need matplotlib (optional)",
    ("grid_tasks.cli.simulate", "grid_tasks.sim.plots"): "matplotlib (optional)",
    ("grid_tasks.cli.simulate_grid", "grid_tasks.sim.grid_plots"): "matplotlib (optional)",
}


def layer(module: str) -> int:
    if module == "grid_tasks":  # the public API (Grid, JobHandle, ...): the client's
        return LAYERS["client"]
    name = module.removeprefix("grid_tasks.")
    if name in TASK_MODULES:
        return TASK_LAYER
    best = ""
    for prefix in LAYERS:
        if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > len(best):
            best = prefix
    return LAYERS.get(best, 0)


def upward(found: list[Edge]) -> list[str]:
    """Imports of a higher layer by a lower one."""
    return [f"{e.source} (layer {layer(e.source)}) imports {e.target} "
            f"(layer {layer(e.target)}) at line {e.line}"
            for e in found if layer(e.target) > layer(e.source)]


@pytest.fixture(scope="module")
def graph() -> list[Edge]:
    return edges(module_sources(ROOT, "grid_tasks"), "grid_tasks")


def test_lower_layers_never_import_higher_ones(graph):
    assert upward(graph) == []


def test_nothing_below_the_client_imports_it(graph):
    assert [e for e in graph if e.target == "grid_tasks.client"
            and layer(e.source) < layer("grid_tasks.client")] == []


def test_no_import_cycles(graph):
    assert cycles(graph) == []


def test_the_broker_reaches_the_rms_by_task_name_only(graph):
    """No broker module imports an RM's side (native or Slurm): it sends their tasks."""
    rm_side = ("grid_tasks.scheduling", "grid_tasks.slurm", "grid_tasks.gram")
    assert [f"{e.source} imports {e.target}" for e in graph
            if e.source.startswith("grid_tasks.broker") and e.target.startswith(rm_side)] == []


def test_imports_inside_functions_only_where_a_light_process_needs_them(graph):
    local = {(e.source, e.target) for e in graph if e.local}
    assert sorted(local - set(LOCAL_IMPORTS_ALLOWED)) == []
    assert sorted(set(LOCAL_IMPORTS_ALLOWED) - local) == []  # the list stays true


def test_the_checker_sees_a_cycle_and_an_upward_import():
    sources = {
        "grid_tasks": "",
        "grid_tasks.gram": "",
        "grid_tasks.gram.records": "def flush():\n    from grid_tasks.client import Grid\n",
        "grid_tasks.client": "from grid_tasks.gram.records import flush\n",
    }
    found = edges(sources, "grid_tasks")
    assert cycles(found) == [["grid_tasks.client", "grid_tasks.gram.records"]]
    assert upward(found) == ["grid_tasks.gram.records (layer 5) imports grid_tasks.client "
                             "(layer 9) at line 2"]
    assert [e.local for e in found if e.source == "grid_tasks.gram.records"] == [True]


def test_type_only_imports_are_not_edges():
    sources = {"grid_tasks": "", "grid_tasks.a": "from typing import TYPE_CHECKING\n"
               "if TYPE_CHECKING:\n    from grid_tasks.b import B\n",
               "grid_tasks.b": "from grid_tasks.a import x\n"}
    assert cycles(edges(sources, "grid_tasks")) == []


def test_an_application_loads_no_database_layer():
    """The client asks the gatekeepers and the scheduler; it never loads SQLAlchemy."""
    code = ("import sys, grid_tasks.client; "
            "print(sorted(m for m in ('sqlalchemy', 'alembic') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT.parent).stdout.strip()
    assert out == "[]"
