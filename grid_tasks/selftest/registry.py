"""Every attack by name, in the order ``selftest --security`` runs them."""

from __future__ import annotations

from grid_tasks.selftest.bounds import MilBacktracking, RslDoubling
from grid_tasks.selftest.confinement import ReadDaemonEnviron, RootOnlyStdin
from grid_tasks.selftest.messages import (NodeSignedLaunch, RenamedLaunch, UnsignedLaunch,
                                          UntrustedSubmit, UserShutdown, UserSignedLaunch)
from grid_tasks.selftest.modes import FileModes
from grid_tasks.selftest.reports import NodeRewritesJob
from grid_tasks.selftest.rows import Attack

ATTACKS: dict[str, type[Attack]] = {a.name: a for a in (
    UnsignedLaunch, UserSignedLaunch, NodeSignedLaunch, RenamedLaunch, UserShutdown,
    UntrustedSubmit, NodeRewritesJob, ReadDaemonEnviron, RootOnlyStdin, RslDoubling, MilBacktracking,
    FileModes)}
