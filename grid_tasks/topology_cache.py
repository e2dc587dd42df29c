"""The grid topology of a long-running process, parsed again only when its file changed.

A gatekeeper checks every node registration against the topology.  Parsing the file
per registration made a starting grid's registrations cost O(nodes²): a parse of a
1,000-node file takes ~19 ms of CPU (2.4 ms at 100 nodes), so the gatekeepers spent
~19 s of CPU recording the registrations of a 1,000-node grid, 80 times the 100-node
grid's, and were still at it when the grid was otherwise idle.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from grid_tasks.errors import GridTasksError
from grid_tasks.topology import GridTopology, load_topology

_lock = threading.Lock()
_loaded: dict[Path, tuple[tuple[int, int], GridTopology | GridTasksError]] = {}


def current_topology(path: str | os.PathLike[str]) -> GridTopology:
    """:func:`~grid_tasks.topology.load_topology` of ``path``, from memory while the
    file keeps its modification time and size; its ConfigError when unreadable or
    invalid (kept for that version of the file as well)."""
    path = Path(path)
    try:
        info = path.stat()
    except OSError:
        return load_topology(path)  # raises the ConfigError saying why
    stamp = (info.st_mtime_ns, info.st_size)
    with _lock:
        hit = _loaded.get(path)
    if hit is not None and hit[0] == stamp:
        found = hit[1]
    else:
        try:
            found = load_topology(path)
        except GridTasksError as exc:
            found = exc
        with _lock:
            _loaded[path] = (stamp, found)
    if isinstance(found, GridTasksError):
        raise found.with_traceback(None)  # (a kept error's traceback must not grow)
    return found


__all__ = ["current_topology"]
