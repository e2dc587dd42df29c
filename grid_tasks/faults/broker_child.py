"""A live broker process for the broker fault case (``python -m grid_tasks.faults.broker_child CFG``).

It co-reserves one job over two resource managers of the fault grid (settings from the
environment) through :class:`grid_tasks.broker.live.Broker`: tokens taken in the token
store, then every RM's ``reserve`` task writing its grid reservation in SQL.  Right
after the RMs accepted, before the tokens are confirmed, it writes the ``flag`` file
(the job key and the tokens held) and blocks, so the parent can SIGKILL it with a
reservation half-made: rows in SQL, tokens unconfirmed in Redis.

CFG keys: ``flag`` (path), ``rsl`` (the request), ``job_key``, ``ttl`` (token TTL, s),
``lead`` (s from now to the common start).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from grid_tasks.broker.holds import RmHolds
from grid_tasks.broker.live import Broker
from grid_tasks.client import Grid
from grid_tasks.legion.collection import Requester
from grid_tasks.settings import Settings

#: Who the fault case's broker reserves for (the demo grid accepts any local user).
REQUESTER = Requester("fault-broker", (), "localhost")


def hold_after_reserve(flag: Path, job_key: str) -> None:
    """Make every RmHolds block once all its RMs accepted (tokens not yet confirmed)."""
    reserve = RmHolds.confirm

    def confirm(self: RmHolds, schedule: Any) -> bool:
        accepted = reserve(self, schedule)
        if accepted:
            held = [self.enactor.token_of(p) for p in schedule.placements]
            flag.write_text(json.dumps({"job_key": job_key, "tokens": held,
                                        "rms": sorted({p.rm for p in schedule.placements})}))
            time.sleep(600)  # killed here: grid reservations in SQL, tokens unconfirmed
        return accepted

    RmHolds.confirm = confirm  # type: ignore[method-assign]


def main(cfg: dict[str, Any]) -> None:
    settings = Settings.from_env()
    grid = Grid(settings)
    hold_after_reserve(Path(cfg["flag"]), cfg["job_key"])
    with Broker.for_settings(settings, grid.app, ttl=float(cfg["ttl"]),
                             lead=float(cfg["lead"]), timeout=20.0) as broker:
        comps = broker.components(cfg["rsl"], REQUESTER)
        broker.coreserve(comps, now=time.time(), job_key=cfg["job_key"], requester=REQUESTER)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
