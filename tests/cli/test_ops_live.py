"""End to end: real jobs submitted through Grid run on node daemon processes under the
live Maui iteration, and the operator commands see them (showq, checkjob, checknode,
canceljob, showstats)."""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import psutil
import pytest

from grid_tasks.embedded.stack import grid_tasks_command
from grid_tasks.states import JobState
from tests.gram.conftest import module_grid  # noqa: F401 (the live grid fixture)

# Starting a live grid costs seconds: slow, like the GRAM flow tests whose grid it reuses.
pytestmark = pytest.mark.slow

COMMAND = grid_tasks_command()


@pytest.fixture(scope="module")
def live(module_grid: Any) -> tuple[Any, dict[str, str]]:
    """(grid, env) of the GRAM tests' live grid on SQLite: in-process scheduler worker,
    subprocess node daemons for rmA's node1/node2 and rmB's node3.  (The same tests on
    ``postgres_grid`` pass alone, but after ``module_grid`` in one session the two grids
    share Redis dbs 4-6, so they are not run here; the ops logic is covered on
    PostgreSQL by tests/ops.)"""
    return module_grid.grid, module_grid.env


def cli(env: dict[str, str], *args: str) -> Any:
    """Run ``grid-tasks ARGS --json`` in a subprocess (the workers' threads share this
    process's stdio, which an in-process runner would swap under them)."""
    result = subprocess.run([*COMMAND, *args, "--json"], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, (result.stdout, result.stderr)
    return json.loads(result.stdout)


def wait_state(job: Any, state: JobState, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while job.status().state is not state:
        assert time.monotonic() < deadline, f"job {job.id} never reached {state}"
        time.sleep(0.1)


def test_operator_commands_on_live_jobs(live):
    grid, env = live
    quick = grid.submit("&(executable=/bin/true)(count=1)", rm="rmA", user="opsA")
    assert quick.wait(timeout=30).state is JobState.DONE
    long = grid.submit('&(executable=/bin/sleep)(arguments="61")(count=4)(maxWallTime=2)',
                       rm="rmA", user="opsB")
    wait_state(long, JobState.ACTIVE)
    big = grid.submit('&(executable=/bin/true)(count=8)(maxWallTime=1)', rm="rmA", user="opsC")
    queue = cli(env, "showq", "-r", "rmA")
    assert [r["job_id"] for r in queue["active"]] == [long.id]
    assert [r["job_id"] for r in queue["idle"]] == [big.id]
    assert queue["summary"]["procs_active"] == 4
    why = cli(env, "checkjob", str(big.id))
    assert why["state"] == "Idle" and why["reasons"]
    assert why["reasons"][0]["kind"] in ("reservation", "resources")
    running_on = next(iter(cli(env, "checkjob", str(long.id))["nodes"]))
    node = cli(env, "checknode", running_on)
    assert [j["job_id"] for j in node["jobs"]] == [long.id]
    assert node["state"] in ("Busy", "Running") and node["last_heartbeat"] is not None
    # the idle job first: cancelling the running one frees the nodes it waits for
    cancelled = cli(env, "canceljob", str(big.id), str(long.id))
    assert [c["job_id"] for c in cancelled] == [big.id, long.id]
    assert cancelled[0]["state"] == "FAILED"  # an idle job fails at once
    # the running one is killed on its nodes: canceljob waits for the end it leads to
    assert cancelled[1]["previous_state"] == "ACTIVE"
    assert (cancelled[1]["state"], cancelled[1]["settled"]) == ("FAILED", True)
    assert long.wait(timeout=30).state is JobState.FAILED
    deadline = time.monotonic() + 10
    while any(p.info["cmdline"] == ["/bin/sleep", "61"]
              for p in psutil.process_iter(["cmdline"])):
        assert time.monotonic() < deadline, "cancelled job's process still alive"
        time.sleep(0.2)
    assert big.wait(timeout=30).state is JobState.FAILED
    assert cli(env, "showq")["summary"]["total_jobs"] == 0
    stats = cli(env, "showstats", "-u")
    rows = {r["key"]: r for r in stats["rows"]}
    assert rows["opsA"]["succeeded"] == 1 and rows["opsB"]["failed"] == 1
    assert rows["opsB"]["proc_hours"] > 0  # it ran on 4 processors before the cancel
    again = subprocess.run([*COMMAND, "canceljob", str(long.id)], env=env, capture_output=True,
                           text=True, timeout=60)
    assert again.returncode == 1 and "already finished" in again.stderr


def test_setres_is_honoured_by_the_live_scheduler(live):
    grid, env = live
    made = cli(env, "setres", "--rm", "rmA", "-u", "vip", "-d", "10m", "-n", "vipres", "ALL")
    assert made["procs"] == 8 and made["iteration_triggered"] is True
    plain = grid.submit("&(executable=/bin/true)(count=1)(maxWallTime=1)", rm="rmA",
                        user="plain")
    time.sleep(1.5)  # the submission's iteration has run by now
    assert plain.status().state is JobState.PENDING  # kept out by the ACL
    report = cli(env, "checkjob", str(plain.id))
    why = report["reasons"]
    # its earliest start (a job reservation, or just an estimate) is when vipres ends
    assert why and why[0]["kind"] in ("reservation", "resources"), report
    assert "start in 00:09:" in why[0]["message"]
    assert cli(env, "releaseres", "vipres")[0]["iteration_triggered"] is True
    assert plain.wait(timeout=30).state is JobState.DONE
    cli(env, "setres", "--rm", "rmA", "-u", "vip", "-d", "10m", "-n", "vip2", "ALL")
    vip = grid.submit("&(executable=/bin/true)(count=2)(maxWallTime=1)", rm="rmA", user="vip")
    assert vip.wait(timeout=30).state is JobState.DONE  # the ACL admits vip
    cli(env, "releaseres", "vip2")  # the module's grid is left idle and unreserved
