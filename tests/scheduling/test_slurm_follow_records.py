"""The follower's records against real SQL and Redis, with Slurm's answers given: a job
Slurm no longer knows (ended and forgotten while nobody followed) fails with the
reason, an ended job is never touched again, one follower per RM holds the lease, and
a submission wakes it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from grid_tasks import db
from grid_tasks.db.models import Job as JobRow
from grid_tasks.embedded.stack import prepare_database
from grid_tasks.gram.records import Outbox
from grid_tasks.gram.submission import store_submission
from grid_tasks.rsl import lower
from grid_tasks.services import Services
from grid_tasks.scheduling.slurm_follow import MISSES_TO_LOSE, Follower
from grid_tasks.slurm.parse import SlurmJob
from grid_tasks.scheduling.slurm_jobs import SLURM, slurm_side, wake_key
from grid_tasks.scheduling.slurm_watch import (HURRY_INTERVAL, IDLE_INTERVAL, INTERVAL,
                                               RETRY_INTERVAL, SlurmWatch)
from grid_tasks.states import JobState
from grid_tasks.topology import load_topology


class Answers:
    """The Slurm RM's answers on its jobs' states (a Slurm that forgot a job cannot be had
    on demand: MinJobAge is minutes)."""

    def __init__(self) -> None:
        self.known: dict[str, SlurmJob] = {}

    def states(self, ids: Any = None) -> dict[str, SlurmJob]:
        return dict(self.known)


@pytest.fixture
def services(settings, tmp_path) -> Iterator[Services]:
    topology = tmp_path / "grid.toml"
    topology.write_text('[rm.sl]\nkind = "slurm"\nslurm_conf = "/nonexistent/slurm.conf"\n')
    mine = settings.replace(topology_file=topology)
    assert prepare_database(mine, load_topology(topology))
    made = Services(mine)
    yield made
    made.close()
    db.dispose_engines()


def stored(services: Services, slurm_id: int) -> int:
    def handed(session: Any, job_id: int) -> None:
        row = session.get(JobRow, job_id)
        row.request = {**row.request, SLURM: {"id": slurm_id, "folder": None, "user": None}}

    (sub,) = lower("&(executable=/bin/true)")
    job_id, _, _ = store_submission(services, "&(executable=/bin/true)", sub, "sl",
                                    {"user": None}, within=handed, hold=Outbox(),
                                    check=lambda *_: None)
    return job_id


def row(services: Services, job_id: int) -> JobRow:
    with db.session_scope(services.sessions) as session:
        found = session.get(JobRow, job_id)
        session.expunge(found)
        return found


def test_a_job_slurm_forgot_unseen_fails_with_the_reason(services):
    answers = Answers()
    job_id = stored(services, 42)
    follower = Follower(services, "sl", answers, lose_after_s=1.0)
    for _ in range(MISSES_TO_LOSE - 1):
        assert follower.once() == 1
    assert follower.once() == 1  # not yet: missing for less than lose_after_s
    time.sleep(1.0)
    assert follower.once() == 0
    lost = row(services, job_id)
    assert (lost.state, lost.gram_error) == (JobState.FAILED, "JOB_EXECUTION_FAILED")
    assert "no longer knows its job 42" in lost.failure_reason


def test_an_ended_job_keeps_its_end_after_slurm_forgets_it(services):
    answers = Answers()
    job_id = stored(services, 43)
    answers.known["43"] = SlurmJob(43, "COMPLETED", "None", 5, None, 1.0, 2.0, "g1")
    follower = Follower(services, "sl", answers)
    assert follower.once() == 0
    answers.known.clear()  # MinJobAge passed
    for _ in range(MISSES_TO_LOSE + 1):
        assert follower.once() == 0
    done = row(services, job_id)
    assert (done.state, done.exit_code) == (JobState.DONE, 5)
    assert [h.to_state for h in _history(services, job_id)] == [
        JobState.PENDING, JobState.ACTIVE, JobState.DONE]


def test_one_follower_per_rm_holds_the_lease(services):
    side = slurm_side(services.settings, "sl")
    first, second = SlurmWatch(services, side), SlurmWatch(services, side)
    first.follower.backend = second.follower.backend = Answers()
    stored(services, 44)
    assert first.step() == INTERVAL  # it follows the open job
    assert second.step() == RETRY_INTERVAL  # and the other waits
    assert first.step() == INTERVAL


def _history(services: Services, job_id: int) -> list[Any]:
    with db.session_scope(services.sessions) as session:
        found = db.repository.job_history(session, job_id)
        for entry in found:
            session.expunge(entry)
        return found


def test_a_submission_wakes_the_follower_and_it_hurries(services):
    watch = SlurmWatch(services, slurm_side(services.settings, "sl"))
    watch.follower.backend = Answers()
    assert watch.step() == IDLE_INTERVAL and watch.holding
    timer = threading.Timer(0.1, services.redis.rpush, (wake_key("sl"), 1))
    timer.start()
    began = time.monotonic()
    watch.pause(5.0)
    assert time.monotonic() - began < 2.0
    stored(services, 45)
    assert watch.step() == HURRY_INTERVAL  # a new job: look again soon
    timer.join()


class Cancels(Answers):
    """Slurm's answers, and its ``scancel``: refused while ``refusing`` (as for an account
    Slurm does not know), else the job reads CANCELLED on the next look."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str | None]] = []
        self.refusing = True

    def cancel(self, native_id: str, *, account: str | None = None) -> None:
        from grid_tasks.slurm.errors import SlurmRefused

        self.calls.append((native_id, account))
        if self.refusing:
            raise SlurmRefused("scancel refused by Slurm: Access/permission denied")
        self.known[native_id] = SlurmJob(int(native_id), "CANCELLED", "None", 0, 15, 1.0,
                                         2.0, "g1")


def test_a_recorded_cancel_is_applied_by_the_follower_until_slurm_ends_the_job(
        services, monkeypatch):
    from grid_tasks.gram.keys import cancel_key
    from grid_tasks.scheduling import slurm_follow
    from grid_tasks.scheduling.slurm_cancel import request_cancel

    answers = Cancels()
    job_id, other = stored(services, 44), stored(services, 45)
    answers.known["44"] = SlurmJob(44, "RUNNING", "None", None, None, 1.0, None, "g1")
    answers.known["45"] = SlurmJob(45, "COMPLETED", "None", 0, None, 1.0, 2.0, "g2")
    asked = request_cancel(services, job_id, "alice")
    assert (asked.rm, asked.followed) == ("sl", False)  # no follower holds the lease
    assert "gatekeeper is unreachable, it will be retried" in asked.note
    assert request_cancel(services, other, "alice") is not None  # (45 ends on its own)
    assert row(services, job_id).request[SLURM]["cancel"]["by"] == "alice"
    services.redis.delete(cancel_key(job_id))  # the SQL record is what counts
    monkeypatch.setattr(slurm_follow, "CANCEL_AGAIN_S", 0.0)
    follower = Follower(services, "sl", answers)
    assert follower.once() == 1  # refused: retried later, the other job followed on
    assert answers.calls == [("44", None)] and row(services, other).state is JobState.DONE
    answers.refusing = False
    assert follower.once() == 1  # scancel'ed now; Slurm says so on the next look
    assert follower.once() == 0
    ended = row(services, job_id)
    assert (ended.state, ended.failure_reason, ended.gram_error) == (
        JobState.FAILED, "cancelled by user", "USER_CANCELLED")
    assert answers.calls == [("44", None), ("44", None)]
    assert request_cancel(services, job_id, "alice") is None  # ended: nothing to record
