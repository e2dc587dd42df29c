"""Every fault case by name, in the order ``selftest --faults`` runs them."""

from __future__ import annotations

from grid_tasks.faults.cases import (FaultCase, JobManagerKill, NodeKillMidJob, NodeKillMidLaunch,
                                     PostgresRestart, RedisRestart)
from grid_tasks.faults.cases_coord import (NodeKillUnderLoad, RedisLostBeforeRelease,
                                           SchedulerKillHoldingLock)
from grid_tasks.faults.cases_fence import FrozenAfterConfirm, FrozenBeforeConfirm
from grid_tasks.faults.cases_outage import PostgresOutage, SqliteDiskFull
from grid_tasks.faults.ha_broker import BeatKill, BrokerKill

# The cases on grids of their own (a database each) come last: each registers its own
# signing key in this process (FaultGrid.sign_as_user restores the shared grid's).
CASES: dict[str, type[FaultCase]] = {c.name: c for c in (
    NodeKillMidLaunch, NodeKillMidJob, JobManagerKill, BeatKill, BrokerKill, RedisRestart,
    FrozenBeforeConfirm, FrozenAfterConfirm, SchedulerKillHoldingLock, RedisLostBeforeRelease,
    NodeKillUnderLoad, PostgresRestart, PostgresOutage, SqliteDiskFull)}
