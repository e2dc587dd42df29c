"""A co-reserved job that ends before its reserved window does frees its slot at once, on
both kinds of RM: the native RM's iteration drops its grid reservation and the broker's
tokens for it; the Slurm RM's follower, recording the end, has the scheduler prune the
Slurm reservation and release those tokens.  A second job can then take the very slot.

Real parts (tests/duroc/mixed.py): a private Slurm cluster as ``slurm1`` (4 CPUs), a
native rmA (one node of 2 processors) with its node daemon, the scheduler (with Slurm's
commands: it answers the broker for the Slurm RM) and a gatekeeper per RM, as
subprocesses; the token store on the grid's private Redis.  No beat runs: nothing but
the job's end can free the slot before the window ends.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from grid_tasks.broker.live import Broker
from grid_tasks.cli import main
from grid_tasks.legion.collection import Requester
from grid_tasks.states import JobState
from tests.duroc.live import markers
from tests.duroc.mixed import SLURM_RM, component, mixed_grid_of, program
from tests.slurm_site import NEEDS_SLURM
from tests.waiting import until

pytestmark = NEEDS_SLURM
#: Seconds from planning to the common start (both reservations made, both subjobs
#: submitted and bound before it).
LEAD = 5.0
ME = Requester("tester", (), "localhost")


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory):
    yield from mixed_grid_of(tmp_path_factory, scheduler_slurm=True)


def whole_grid(prog: Path, out: Path) -> str:
    """Both RMs' every processor for two minutes: a second such job fits only in a slot
    the first one freed."""
    return "+" + "".join(
        component(rm, label, count, prog, out)[:-1] + "(maxWallTime=2))"
        for rm, label, count in (("rmA", "native", 2), (SLURM_RM, "slurm", 4)))


def held(live, job_key: str) -> list[dict]:
    """The broker tokens of ``job_key``, as ``grid-tasks tokens list --json`` lists them."""
    shown = CliRunner().invoke(main, ["tokens", "list", "--json"], env=live.env)
    assert shown.exit_code == 0, shown.output
    return [t for t in json.loads(shown.stdout) if t["group"] == job_key]


def slurm_reservations(live) -> str:
    return live.slurm_cluster.run("scontrol", "-o", "show", "reservation").stdout


def test_a_coreserved_job_that_ends_early_frees_its_tokens_on_both_kinds(live, tmp_path):
    out = tmp_path / "markers"
    out.mkdir()
    rsl = whole_grid(program(tmp_path), out)
    job = live.grid.job_request(rsl, barrier_timeout=60, coreserve=True, lead=LEAD)
    co = job.coreservation
    assert {p.rm for p in co.parts} == {"rmA", SLURM_RM}
    tokens = held(live, co.job_key)
    assert {t["resource"].split("/")[0] for t in tokens} == {"rmA", SLURM_RM}
    assert max(t["end"] for t in tokens) >= co.start + 120  # held over the whole window
    assert f"gt-{SLURM_RM}-" in slurm_reservations(live)
    final = job.wait(timeout=60)
    assert final.state is JobState.DONE and final.barrier == "released", final
    assert markers(out) == ["native-0", "native-1", "slurm-0", "slurm-1", "slurm-2",
                            "slurm-3"]
    ended = time.time()
    assert ended < co.start + 60  # well inside the reserved window
    # each RM's one writer of its grid reservations frees the slot as the job ends
    until(lambda: held(live, co.job_key) == [], 20, "the job's tokens released")
    until(lambda: f"gt-{SLURM_RM}-" not in slurm_reservations(live), 10,
          "the Slurm reservation deleted")
    assert time.time() < co.start + 120  # long before the window ends
    with Broker.for_settings(live.settings, live.grid.app, lead=LEAD, timeout=20.0) as broker:
        assert broker.release(co) == 0  # nothing was left to release
        again = broker.coreserve(broker.components(rsl, ME), now=time.time(), requester=ME)
        try:  # the same processors, inside the first job's window
            assert again.start < co.start + 120, (again.start, co.start)
            assert {p.rm for p in again.parts} == {"rmA", SLURM_RM}
        finally:
            assert broker.release(again) == 2
