"""High availability of the beat that drives the scheduling iterations.

Run two (or more) ``grid-tasks beat`` processes: they share one schedule in
Redis (celery-redbeat) and a leadership lease (:mod:`.lease`); only the lease
holder sends periodic tasks, and a standby takes over within
``lease + poll`` seconds of the leader's death (:mod:`.config`).
:mod:`.status` reads who leads and what was sent.
"""

from grid_tasks.ha.config import BeatOptions, beat_config
from grid_tasks.ha.lease import Holder, Lease, read_holder
from grid_tasks.ha.status import BeatStatus, read_status

__all__ = ["BeatOptions", "BeatStatus", "Holder", "Lease", "beat_config", "read_holder",
           "read_status"]
