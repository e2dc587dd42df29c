"""``EmbeddedStack`` / ``grid-tasks up --node-harness K``: K harness processes serve every
node of the topology, and jobs reach DONE on them."""

from __future__ import annotations

import psutil
import pytest

from grid_tasks.client import Grid
from grid_tasks.embedded.stack import EmbeddedStack, StackOptions
from grid_tasks.states import JobState
from tests.conftest import CONFIG_DIR
from tests.waiting import until


@pytest.mark.slow  # a whole grid: ~8 s on an idle machine, 29 s under load
def test_k_harness_processes_serve_every_node_and_jobs_end_done(tmp_path):
    topo = tmp_path / "grid.toml"
    topo.write_text("".join(f'[rm.r{r}]\npolicy_file = "{CONFIG_DIR / "demo.cfg"}"\n'
                            f'[rm.r{r}.node."r{r}n[01-10]"]\nprocs = 2\n' for r in (1, 2)))
    options = StackOptions(topology_file=topo, state_dir=tmp_path / "s", loglevel="WARNING",
                           node_harness=3, harness_jobs="standin", announce=False)
    with EmbeddedStack(options) as stack:
        harnesses = [c for c in stack.supervisor.children if c.name.startswith("node-harness")]
        assert len(harnesses) == 3  # 20 nodes: 6, 7 and 7 identities; no daemon per node
        assert not [c for c in stack.supervisor.children
                    if c.name.startswith("node-") and not c.name.startswith("node-harness")]
        statuses = stack.registry().statuses(stack.node_names())
        assert len(statuses) == 20 and all(s.last_heartbeat for s in statuses)
        pids = stack.pids()
        with Grid(stack.settings) as grid:
            jobs = [grid.submit("&(executable=/bin/true)(count=2)", rm=rm) for rm in ("r1", "r2")]
            ended = [until(lambda j=j: (lambda s: s if s.terminal else None)(j.status().state),
                           60, f"job {j.id} to end") for j in jobs]
        assert ended == [JobState.DONE, JobState.DONE]
    assert not [p for p in pids if psutil.pid_exists(p)
                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
