"""A gatekeeper cancelling its own subjob in place: the DUROC header step that submits a
Slurm subjob, run by a worker of that Slurm RM's gatekeeper queue, finds the job
cancelled meanwhile and ``scancel``s the subjob right there (it must not wait on its
own queue, nor leave the cancel to a follower).

Made deterministic by taking the steps one by one: the coallocated job is stored (its
SQL rows and coordination store, as a request stores them, no chord sent), the owner's
cancel aborts its barrier, then this process - a real worker consuming ``gram.slurm1`` -
runs the header's submission.  Real Slurm, Redis, SQL, and the grid's gatekeeper
subprocess following the job.  (The live grid of tests/slurm/conftest.py.)
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from grid_tasks import db
from grid_tasks.celery_app import create_app
from grid_tasks.duroc.control import Coallocator
from grid_tasks.duroc.control_rows import URL_KEY, insert_coallocation
from grid_tasks.duroc.records import store_id
from grid_tasks.duroc.settle import CANCELLED_REASON
from grid_tasks.duroc.store_models import SubjobSpec
from grid_tasks.queues import gatekeeper_queue
from grid_tasks.rsl import lower
from grid_tasks.services import Services
from grid_tasks.slurm import SlurmClient
from grid_tasks.states import JobState
from tests.slurm.conftest import ALICE, RM
from tests.waiting import until

RSL = f"+(&(resourceManagerContact={RM})(label=s)(executable=/bin/sleep)(arguments=300))"


def stored_coallocation(co: Coallocator) -> int:
    """What a request stores before it sends its chord: the rows and the store."""
    subs = lower(RSL)
    deadline = datetime.now(timezone.utc) + timedelta(seconds=60)
    with db.session_scope(co.services.sessions) as session:
        job_id = insert_coallocation(session, RSL, ALICE, 60.0, subs, ["s"], deadline)
    co.store.create_job(store_id(job_id), [SubjobSpec("s", 1, subs[0].start_type,
                                                      subs[0].comms_type)],
                        ttl_s=600, auto_release=True)
    co.store.grant_access(store_id(job_id), scripts_loaded=True,
                          remember=(URL_KEY.format(job_id), 600))
    return job_id


def gram_row(services: Services, gram_id: int) -> db.models.Job:
    with db.session_scope(services.sessions) as session:
        row = db.repository.get_job(session, gram_id)
        session.expunge(row)
        return row


def test_a_header_at_the_slurm_gatekeeper_cancels_its_subjob_in_place(slurm_grid,
                                                                      in_process_worker):
    app = create_app(slurm_grid.settings)
    in_process_worker(app, queues=[gatekeeper_queue(RM)])  # this process: RM's gatekeeper
    services = Services(slurm_grid.settings, app=app)
    co = Coallocator(services)
    try:
        assert co._serves(RM)
        job_id = stored_coallocation(co)
        co.store.abort(store_id(job_id), CANCELLED_REASON)  # the owner cancelled meanwhile
        gram_id, stored = co.submit_subjob(job_id, 0, identity=ALICE)
        assert stored
        with db.session_scope(services.sessions) as session:
            row = db.repository.get_job(session, gram_id)
            info, state = dict(row.request["slurm"]), row.state
        # scancel'ed here, before the step returned, as the job's account
        slurm_job = SlurmClient(str(slurm_grid.cluster.conf), "all").jobs([info["id"]])
        assert slurm_job[info["id"]].slurm_state == "CANCELLED"
        assert "cancel" not in info  # not left to the follower as a recorded cancel
        assert info["user"] == slurm_grid.account.pw_name
        # an idle job's cancel is recorded at once; one Slurm started meanwhile (seen by
        # its follower) ends when the follower sees Slurm's CANCELLED
        assert state in (JobState.FAILED, JobState.ACTIVE), state
        until(lambda: gram_row(services, gram_id).state.terminal, 20,
              "the subjob's end recorded")
        ended = gram_row(services, gram_id)
        assert (ended.state, ended.failure_reason, ended.gram_error) == (
            JobState.FAILED, "cancelled by user", "USER_CANCELLED")
    finally:
        services.close()
        app.close()
