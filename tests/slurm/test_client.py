"""The Slurm client against a real private cluster: estimate, submit as the mapped
account, follow to the end with the exit code, cancel, and typed refusals."""

from __future__ import annotations

import shutil
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from grid_tasks.embedded.slurm_cluster import SlurmSite
from grid_tasks.rsl import lower
from grid_tasks.slurm import SlurmClient, SlurmRefused, SlurmUnavailable, batch_job
from grid_tasks.slurm.errors import ReservationInUse
from grid_tasks.slurm.parse import SlurmJob
from grid_tasks.states import JobState
from tests.slurm_site import NEEDS_SLURM, site_fixture

pytestmark = NEEDS_SLURM
site = site_fixture({"s": 2})



@pytest.fixture
def client(site: SlurmSite) -> SlurmClient:
    return SlurmClient(str(site["s"].conf), partition="all")



def follow(client: SlurmClient, job_id: int, until: set[JobState], timeout: float = 20.0) -> SlurmJob:
    deadline = time.monotonic() + timeout
    while True:
        job = client.jobs([job_id]).get(job_id)
        if job is not None and job.state in until:
            return job
        assert time.monotonic() < deadline, f"Slurm job {job_id} is {job}"
        time.sleep(0.05)


def submit(client: SlurmClient, rsl: str, out: Path, user: str | None = None, **kw) -> int:
    job = batch_job(lower(rsl)[0], name="gt.test", output=str(out / "out"), error=str(out / "err"),
                    srun=shutil.which("srun") or "srun", **kw)
    return client.submit(job, user=user)


def test_estimate_on_an_idle_cluster_is_now(client: SlurmClient):
    est = client.estimate(2, 60)
    assert est.procs == 2 and est.partition == "all"
    assert abs(est.start.timestamp() - time.time()) < 60


def test_job_runs_as_the_mapped_account_with_its_environment(client, throwaway_user, open_dir):
    rsl = ('&(executable=/bin/sh)(arguments=-c "id -un; echo $GREETING; exit 3")(jobType=single)'
           '(environment=(GREETING hello))(maxWallTime=1)')
    jid = submit(client, rsl, open_dir, user=throwaway_user.pw_name, environment={"HOME": "/nonexistent"})
    done = follow(client, jid, {JobState.DONE, JobState.FAILED})
    assert (done.state, done.exit_code) == (JobState.FAILED, 3)
    assert (open_dir / "out").read_text().split() == [throwaway_user.pw_name, "hello"]


def test_multiple_starts_count_processes(client, open_dir):
    jid = submit(client, "&(executable=/bin/echo)(arguments=x)(count=3)(maxWallTime=1)", open_dir)
    done = follow(client, jid, {JobState.DONE, JobState.FAILED})
    assert done.state is JobState.DONE and done.exit_code == 0
    assert (open_dir / "out").read_text().split() == ["x", "x", "x"]


def test_cancel_ends_a_running_job(client, open_dir):
    jid = submit(client, "&(executable=/bin/sleep)(arguments=300)(jobType=single)(maxWallTime=5)", open_dir)
    follow(client, jid, {JobState.ACTIVE})
    client.cancel(jid)
    ended = follow(client, jid, {JobState.FAILED, JobState.DONE})
    assert ended.slurm_state == "CANCELLED"


def test_a_job_bigger_than_the_partition_is_refused_not_left_pending(client, open_dir):
    with pytest.raises(SlurmRefused) as err:
        submit(client, "&(executable=/bin/true)(count=5)", open_dir)
    assert err.value.code == "NO_RESOURCES" and "has 4" in str(err.value)


def test_an_unknown_partition_is_invalid_queue(client, open_dir):
    with pytest.raises(SlurmRefused) as err:
        submit(client, "&(executable=/bin/true)(queue=nope)", open_dir)
    assert err.value.code == "INVALID_QUEUE"


def test_a_cluster_that_is_down_is_unavailable(tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=gone\nSlurmctldHost=localhost\nSlurmctldPort=1\n"
                    "NodeName=g1 CPUs=1\nPartitionName=all Nodes=g1\n")
    with pytest.raises(SlurmUnavailable) as err:
        SlurmClient(str(conf), timeout=1).capacity()
    assert err.value.code == "CONNECTION_FAILED"


@pytest.mark.slow  # over 15 s: the 20-minute CI budget (run with -m slow)
def test_a_reserved_job_starts_with_its_reservation_and_sooner_when_moved(client, open_dir):
    """Slurm checks reservations every 5 s: a job waits for its reservation's start and
    begins within that check after it; moving the start to now starts it at once."""
    start = datetime.now(timezone.utc) + timedelta(seconds=4)
    client.reserve("gt-r1", start, 60, 2, "root")
    try:
        jid = submit(client, "&(executable=/bin/true)(count=2)(maxWallTime=1)", open_dir,
                     reservation="gt-r1")
        assert follow(client, jid, {JobState.PENDING}).reason in ("Reservation", "None", "Resources")
        done = follow(client, jid, {JobState.DONE})
        assert start.timestamp() - 1 <= done.start_time <= start.timestamp() + 6
    finally:
        _release(client, "gt-r1")
    later = datetime.now(timezone.utc) + timedelta(minutes=10)
    client.reserve("gt-r2", later, 60, 1, "root")
    try:
        jid = submit(client, "&(executable=/bin/true)(maxWallTime=1)", open_dir, reservation="gt-r2")
        moved_at = time.time()
        client.move_reservation("gt-r2", datetime.now(timezone.utc))
        done = follow(client, jid, {JobState.DONE})
        assert done.start_time - moved_at < 6
    finally:
        _release(client, "gt-r2")


def test_a_reservation_in_use_is_not_released(client, open_dir):
    client.reserve("gt-r3", datetime.now(timezone.utc), 60, 1, "root")
    jid = submit(client, "&(executable=/bin/sleep)(arguments=60)(jobType=single)(maxWallTime=1)",
                 open_dir, reservation="gt-r3")
    try:
        follow(client, jid, {JobState.ACTIVE})
        with pytest.raises(ReservationInUse):
            client.release("gt-r3")
    finally:
        client.cancel(jid)
        follow(client, jid, {JobState.FAILED})
        _release(client, "gt-r3")


def _release(client: SlurmClient, name: str) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            return client.release(name)
        except ReservationInUse:
            assert time.monotonic() < deadline
            time.sleep(0.2)
