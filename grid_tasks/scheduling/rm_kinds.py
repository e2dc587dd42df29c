"""Which implementation of the RM interface serves a resource manager: chosen once per
RM from its topology ``kind`` (flux-sched picks its resource-manager plug-in the same
way), so nothing above this module asks what kind an RM is.

An RM the topology does not name (a grid whose database knows RMs its topology file
has lost, or tests that make RMs in SQL only) is a native one, as every RM was before
Slurm clusters came.

Each other kind's implementation is named by its module (:data:`KINDS`) and imported
when an RM of that kind is first served, as plug-ins are: a grid of native RMs, and
each operator command asking one (``showstart`` is a new process), never loads the
Slurm client and the RSL lowering it translates from.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grid_tasks.errors import GridTasksError
from grid_tasks.scheduling.native_rm import NativeRM
from grid_tasks.scheduling.rm_backend import RMBackend
from grid_tasks.topology import GridTopology, ResourceManagerSpec, RMKind
from grid_tasks.topology_cache import current_topology

log = logging.getLogger(__name__)

#: The implementation of each kind: ``module:class``, whose ``for_spec`` makes it from
#: the RM's topology entry (imported on first use, see the module docstring).
KINDS: dict[RMKind, str] = {
    RMKind.SLURM: "grid_tasks.scheduling.slurm_rm:SlurmRM",
}


def kind_factory(kind: RMKind) -> Callable[[ResourceManagerSpec], RMBackend]:
    """The ``for_spec`` of ``kind``'s implementation (its module imported now)."""
    module, name = KINDS[kind].split(":")
    return getattr(importlib.import_module(module), name).for_spec

#: The last unreadable topology's error per file (logged once, not per iteration).
_warned: dict[Path, str] = {}


def topology_of(path: Path) -> GridTopology | None:
    """The topology in ``path``, read again only when the file changed (the process's
    one cache: :func:`~grid_tasks.topology_cache.current_topology`); None (logged once
    per error) when it cannot be read: every RM is then served as a native one."""
    path = Path(path)
    try:
        topology = current_topology(path)
    except GridTasksError as exc:
        if _warned.get(path) != str(exc):
            _warned[path] = str(exc)
            log.warning("topology %s unreadable, every RM served as native: %s", path, exc)
        return None
    _warned.pop(path, None)
    return topology


def backend_for(rm: str, topology: GridTopology | None, *, registry: Any = None) -> RMBackend:
    """The RM interface for ``rm``: its kind's implementation, native when the topology
    does not name it.  ``registry``: node liveness, which only a native RM has."""
    spec = topology.rms.get(rm) if topology is not None else None
    if spec is None or spec.kind is RMKind.MAUI:
        return NativeRM(rm, registry)
    return kind_factory(spec.kind)(spec)
