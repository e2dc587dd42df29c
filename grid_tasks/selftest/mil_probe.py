"""Child process of the ``mil-backtracking`` attack: evaluate one MIL query against the
live collection of the grid in the environment; print ``ready``, then a JSON line with
the outcome and the seconds the query alone took."""

from __future__ import annotations

import json
import sys
import time

from grid_tasks.legion.collection import Collection, Requester
from grid_tasks.mil import MILError
from grid_tasks.settings import Settings
from grid_tasks.topology import load_topology


def main(query: str) -> None:
    settings = Settings.from_env()
    collection = Collection.live_from_settings(settings, load_topology(settings.topology_file))
    requester = Requester.current()
    print("ready", flush=True)
    started = time.monotonic()
    try:
        found = collection.query(query, requester)
        outcome = f"answered ({len(found)} match)"
    except MILError as exc:
        outcome = f"refused: MIL error {str(exc).splitlines()[0][:80]}"
    print(json.dumps({"outcome": outcome, "seconds": time.monotonic() - started}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
