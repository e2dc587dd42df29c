"""Grid reservations in the live iteration (real SQLite, real private Redis, the real
iteration; launches go to the broker, no node runs them): a job bound to a grid
reservation starts inside it, the token is checked at start (veto), half-made
reservations are pruned, and a lost token store is restored before anything is pruned."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest
import redis
from sqlalchemy import select

from grid_tasks import db
from grid_tasks.db.errors import ConcurrentUpdateError
from grid_tasks.db.testing import postgres_test_url, temporary_database
from grid_tasks.embedded.stack import prepare_database
from grid_tasks.gram.records import Outbox
from grid_tasks.gram.submission import build_job
from grid_tasks.legion.tokens import Claim, TokenStore, scan
from grid_tasks.maui import Start
from grid_tasks.node.registry import NodeRegistry
from grid_tasks.rsl import lower
from grid_tasks.scheduling import rm_service
from grid_tasks.scheduling import grid_reservations
from grid_tasks.scheduling.grid_reservations import PRUNE_AFTER_S, SENTINEL
from grid_tasks.scheduling.iteration import run_iteration
from grid_tasks.states import JobState
from grid_tasks.topology import load_topology

TOPOLOGY = '[rm.rmA]\n[rm.rmA.node.node1]\nprocs = 2\n[rm.rmA.node.node2]\nprocs = 2\n'
CAPACITIES = {"rmA/node1": 2, "rmA/node2": 2}


class Grid:
    """One RM in SQLite, its nodes alive in the registry, a token store on the same Redis."""

    def __init__(self, tmp_path, settings, celery_app_factory) -> None:
        (tmp_path / "grid.toml").write_text(TOPOLOGY)
        settings = settings.replace(topology_file=tmp_path / "grid.toml")
        prepare_database(settings, load_topology(settings.topology_file))
        self.app = celery_app_factory(settings)
        self.client = redis.Redis.from_url(settings.redis_url)
        self.registry = NodeRegistry(self.client, 30)
        self.heartbeat()
        self.sessions = db.session_factory(db.get_engine(settings.database_url))
        self.store = TokenStore(self.client)
        self.store.set_capacities(CAPACITIES)
        self.t = float(int(time.time()))  # whole seconds: exact as SQL datetimes

    def heartbeat(self) -> None:
        for node in ("node1", "node2"):
            self.registry.register("rmA", node, {}, {}, "test", time.time())

    def token(self, start: float, end: float, procs: int = 2, confirm: bool = True,
              ttl: float | None = None, node: str = "node1") -> str:
        """A broker's token on ``node`` (confirmed, or left to expire)."""
        taken = self.store.take([Claim(f"rmA/{node}", start, end, procs)], "broker-t", ttl=ttl)
        if confirm:
            self.store.confirm(taken, "grid-job-1")
        return taken[0].id

    def reserve(self, token: str, start: float, name: str = "g1", node: str = "node1",
                **kw) -> dict:
        with db.session_scope(self.sessions) as s:
            return rm_service.reserve(s, "rmA", name=name, allocation={node: 2},
                                      start=start, duration=600.0, token=token,
                                      job_key="grid-job-1", now=time.time(), **kw)

    def enact(self, token: str, name: str = "g1") -> int:
        """What the broker does once it confirmed the tokens: mark the row enacted."""
        with db.session_scope(self.sessions) as s:
            return rm_service.mark_enacted(s, [("rmA", name, token)])

    def submit(self, rsl: str) -> int:
        with db.session_scope(self.sessions) as s:
            return build_job(s, "rmA", rsl, lower(rsl)[0], {"user": "u"},
                             datetime.now(timezone.utc), Outbox()).id

    def finish(self, job: int) -> None:
        """The job ran and ended (as its job manager reports it)."""
        with db.session_scope(self.sessions) as s:
            row = db.repository.get_job(s, job)
            db.record_transition(s, row, JobState.ACTIVE, "started", datetime.now(timezone.utc))
            db.record_transition(s, row, JobState.DONE, "exit 0", datetime.now(timezone.utc))

    def iterate(self, at: float) -> list[int]:
        return run_iteration(self.app, "rmA", sessions=self.sessions, redis=self.client,
                             registry=self.registry, now=at).started

    def reservation(self, name: str = "g1"):
        with db.session_scope(self.sessions) as s:
            return rm_service.find_grid_reservation(s, "rmA", name)

    def history(self, job: int) -> list[str]:
        with db.session_scope(self.sessions) as s:
            return [h.reason or "" for h in db.repository.job_history(s, job)]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def grid(request, tmp_path, settings, celery_app_factory):
    server = None
    if request.param == "postgresql":
        server = postgres_test_url()
        if server is None:
            pytest.skip("GRID_TASKS_TEST_POSTGRES_URL is not set")
    with temporary_database(server, prefix="gt_gridres") as url:
        g = Grid(tmp_path, settings.replace(database_url=url), celery_app_factory)
        yield g
        g.client.close()
        db.dispose_engines()


BOUND = "&(executable=/bin/true)(count=2)(maxWallTime=10)(reservation=g1)"


def test_bound_job_starts_when_its_reservation_begins_not_before(grid):
    t = grid.t
    grid.reserve(grid.token(t + 100, t + 700), t + 100)
    job = grid.submit(BOUND)
    assert grid.iterate(t) == []  # resources are free, but early start is forbidden
    assert grid.iterate(t + 50) == []
    assert grid.iterate(t + 100) == [job]
    with db.session_scope(grid.sessions) as s:
        assert db.repository.get_job(s, job).nodes_allocated == {"node1": 2}


def test_allow_early_starts_at_once_when_resources_are_free(grid):
    t = grid.t
    grid.reserve(grid.token(t + 100, t + 700), t + 100, allow_early=True)
    job = grid.submit(BOUND)
    assert grid.iterate(t) == [job]


def test_reserved_node_is_kept_from_other_jobs(grid):
    t = grid.t
    grid.reserve(grid.token(t, t + 600), t)
    other = grid.submit("&(executable=/bin/true)(count=4)(maxWallTime=1)")
    assert grid.iterate(t) == []  # node1 is held by the grid reservation for 10 minutes
    assert grid.iterate(t + 600) == [other]


def test_expired_token_vetoes_the_start_and_the_job_runs_later_unbound(grid):
    t = grid.t
    token = grid.token(t, t + 600, confirm=False, ttl=0.2)
    grid.reserve(token, t)
    job = grid.submit(BOUND)
    time.sleep(0.5)  # the broker never confirmed: its token expires
    assert grid.iterate(t + 1) == []
    assert grid.reservation() is None
    assert any("token " + token in h and "not started" in h for h in grid.history(job))
    with db.session_scope(grid.sessions) as s:
        assert db.repository.get_job(s, job).early_start is True
    assert grid.iterate(t + 2) == [job]  # an ordinary idle job now


def test_unconfirmed_live_token_waits_without_dropping(grid):
    t = grid.t
    grid.reserve(grid.token(t, t + 600, confirm=False, ttl=30), t)
    job = grid.submit(BOUND)
    assert grid.iterate(t + 1) == []
    assert grid.reservation() is not None  # the broker may still confirm
    grid.store.confirm([grid.store.get(grid.reservation().token)], "grid-job-1")
    assert grid.iterate(t + 2) == [job]


def test_half_made_reservations_are_pruned_after_the_token_ttl(grid):
    t = grid.t
    assert grid.iterate(t) == []  # the store is known not lost from here on
    grid.reserve("never-taken", t + 3000, name="half")
    grid.reserve(grid.token(t + 100, t + 700), t + 100, name="whole")
    grid.iterate(t + 1)
    assert grid.reservation("half") is not None  # young: its broker may be confirming
    grid.iterate(t + PRUNE_AFTER_S + 30)
    assert grid.reservation("half") is None
    assert grid.reservation("whole") is not None


def test_reservation_goes_with_its_finished_job_or_its_end(grid):
    t = grid.t
    grid.reserve(grid.token(t, t + 600), t)
    job = grid.submit(BOUND)
    assert grid.iterate(t) == [job]
    grid.finish(job)
    grid.iterate(t + 10)
    assert grid.reservation() is None
    grid.reserve(grid.token(t + 700, t + 1300), t + 700, name="g2")
    grid.iterate(t + 1300)
    assert grid.reservation("g2") is None


def test_a_finished_jobs_tokens_on_this_rm_are_released_with_its_reservation(grid):
    t = grid.t
    grid.reserve(grid.token(t, t + 600), t)
    # the same co-reserved job also holds rmB (another RM's part: not this RM's to free)
    grid.store.set_capacities({**CAPACITIES, "rmB/node9": 2})
    other = grid.store.confirm(grid.store.take([Claim("rmB/node9", t, t + 600, 2)], "b"),
                               "grid-job-1")
    job = grid.submit(BOUND)
    assert grid.iterate(t) == [job]
    held = [tk for tk in grid.store.tokens() if tk.resource == "rmA/node1"]
    assert held and all(tk.confirmed for tk in held)
    grid.finish(job)
    grid.iterate(t + 10)  # the job ended 590 s before its reservation would have
    assert grid.reservation() is None
    assert [tk.resource for tk in grid.store.tokens()] == ["rmB/node9"]
    assert grid.store.get(other[0].id) is not None
    # node1 is free for other brokers again at once
    again = grid.store.take([Claim("rmA/node1", t + 20, t + 600, 2)], "next-broker")
    assert again


def test_a_grid_reservation_nested_in_its_users_admin_reservation_is_honoured(grid):
    from datetime import timedelta

    from grid_tasks.ops.reservations import ResourceRequest, set_reservation

    t = grid.t
    at = datetime.fromtimestamp(t, timezone.utc)
    with db.session_scope(grid.sessions) as s:  # both nodes, for user u, for an hour
        set_reservation(s, "rmA", ResourceRequest(0, 1, 0, ("node1", "node2")), start=at,
                        end=at + timedelta(hours=1), acl={"users": ["u"]}, now=at)
    grid.reserve(grid.token(t + 100, t + 700), t + 100, requester={"user": "u"})
    job = grid.submit(BOUND)  # submitted by u
    other = grid.submit("&(executable=/bin/true)(count=2)(maxWallTime=10)")  # u too
    # u's other job may use the admin reservation, but not node1's grid slot at t + 100
    assert grid.iterate(t) == [other]
    with db.session_scope(grid.sessions) as s:
        assert db.repository.get_job(s, other).nodes_allocated == {"node2": 2}
    assert grid.iterate(t + 100) == [job]
    assert grid.reservation() is not None
    with db.session_scope(grid.sessions) as s:
        assert db.repository.get_job(s, job).nodes_allocated == {"node1": 2}


def test_restore_after_redis_loss_keeps_valid_reservations(grid):
    t = grid.t
    token = grid.token(t + 100, t + 700)
    grid.reserve(token, t + 100)
    assert grid.enact(token) == 1 and grid.enact(token) == 1  # idempotent
    job = grid.submit(BOUND)
    assert grid.iterate(t) == []
    assert grid.client.exists(grid.store.prefix + SENTINEL)
    grid.client.flushdb()  # Redis lost everything: tokens, capacities, heartbeats
    grid.heartbeat()  # the node daemons beat again
    assert grid.iterate(t + PRUNE_AFTER_S + 100) == [job]  # old enough to be pruned: kept
    assert grid.reservation() is not None
    assert grid.store.capacities() == CAPACITIES
    report = scan(grid.store)
    assert report.ok and report.confirmed == 1
    with pytest.raises(Exception):  # the restored claim still holds node1 for brokers
        grid.store.take([Claim("rmA/node1", t + 200, t + 300, 1)], "broker-2")


def test_a_reservation_made_while_the_iteration_decided_makes_it_decide_again(grid):
    t = grid.t
    with db.session_scope(grid.sessions) as s:
        guard = grid_reservations.prepare(s, "rmA", t, grid.client)
        grid.reserve(grid.token(t, t + 600), t)  # another transaction, committed meanwhile
        with pytest.raises(ConcurrentUpdateError, match="grid reservation was made"):
            guard.veto(s, [Start("1", t, {"node1": 2})])
        assert guard.veto(s, []) == set()
    with db.session_scope(grid.sessions) as s:
        assert len(list(s.scalars(select(db.Reservation)))) == 1


def test_a_binding_committed_after_prepare_reaches_the_loader_and_the_veto(grid):
    """The guard's rows must not shadow what a submission committed meanwhile."""
    from grid_tasks.scheduling.state import load_scheduler

    t = grid.t
    grid.reserve(grid.token(t, t + 600, confirm=False, ttl=30), t)
    with db.session_scope(grid.sessions) as s:
        guard = grid_reservations.prepare(s, "rmA", t, grid.client)
        job = grid.submit(BOUND)  # another transaction binds the job now
        sched = load_scheduler(s, "rmA", now=t)
        assert str(job) in sched.engine.holds["g1"].res.acl.jobs
        # its token is not confirmed yet: the start waits, the reservation stays
        assert guard.veto(s, [Start(str(job), t, {"node1": 2})]) == {str(job)}
    assert grid.reservation() is not None


def test_restore_and_prune_in_one_iteration(grid):
    """Redis lost while a bound job finished: one iteration restores, then drops it."""
    t = grid.t
    token = grid.token(t, t + 600)
    grid.reserve(token, t)
    grid.enact(token)
    job = grid.submit(BOUND)
    assert grid.iterate(t) == [job]
    grid.finish(job)
    grid.client.flushdb()
    grid.heartbeat()
    grid.iterate(t + 10)
    assert grid.reservation() is None
    assert grid.client.exists(grid.store.prefix + SENTINEL)
    assert grid.store.tokens() == []  # its mirrored claim went with it


def test_half_made_reservation_is_not_revived_by_a_restore(grid):
    """A broker died between the RMs' reserve and its confirm, then Redis restarted
    before the prune: the half-made row is not restored (its token stays gone) and is
    pruned once old enough; the enacted one next to it is restored and its job starts."""
    from grid_tasks.legion.collection import enacted
    from grid_tasks.ops.diag_res import diagnose_reservations

    t = grid.t
    whole = grid.token(t + 100, t + 700, node="node2")
    grid.reserve(whole, t + 100, name="whole", node="node2")
    assert grid.enact(whole, "whole") == 1
    half = grid.token(t + 100, t + 700, confirm=False, ttl=30)
    grid.reserve(half, t + 100, name="half")
    assert grid.enact("another-token", "half") == 0  # only the row's own token marks it
    assert not enacted(grid.reservation("half")) and enacted(grid.reservation("whole"))
    job = grid.submit(BOUND.replace("g1", "whole"))
    assert grid.iterate(t) == []
    grid.client.flushall()  # Redis restarted: tokens, capacities, heartbeats gone
    grid.heartbeat()
    assert grid.iterate(t + 1) == []
    assert grid.client.exists(grid.store.prefix + SENTINEL)
    assert grid.store.get(half) is None
    assert [t_.group for t_ in grid.store.tokens()] == ["sql.rmA.whole"]  # half not mirrored
    assert grid.reservation("half") is not None  # young: spared like any unconfirmed one
    with db.session_scope(grid.sessions) as s:  # what diagnose -r shows meanwhile
        shown = {d.row.name: d for d in diagnose_reservations(
            s, datetime.fromtimestamp(t + 1, timezone.utc), tokens=grid.store.get)}
    assert (shown["whole"].enacted, shown["whole"].token_state) == (True, "restored")
    assert (shown["half"].enacted, shown["half"].token_state) == (False, "missing")
    assert any("half-made" in p.message for p in shown["half"].problems)
    assert not any(p.kind == "token" for p in shown["whole"].problems)
    assert grid.iterate(t + PRUNE_AFTER_S + 100) == [job]
    assert grid.reservation("half") is None
    assert grid.reservation("whole") is not None
    report = scan(grid.store)
    assert report.ok and report.confirmed == 1
    grid.store.take([Claim("rmA/node1", t + 200, t + 300, 2)], "broker-2")  # node1 is free
