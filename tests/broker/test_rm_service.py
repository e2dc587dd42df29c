"""The RM side of the metascheduler protocol against real SQL (SQLite; PostgreSQL when
``GRID_TASKS_TEST_POSTGRES_URL`` is set): estimate, reserve, release, binding at submit."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import select

from grid_tasks import db
from grid_tasks.db.testing import clear_tables, postgres_test_url, temporary_database
from grid_tasks.errors import NotFoundError
from grid_tasks.gram.binding import ReservationBindingError
from grid_tasks.gram.records import Outbox
from grid_tasks.gram.submission import build_job
from grid_tasks.maui import Job
from grid_tasks.rsl import lower
from grid_tasks.scheduling import rm_service
from grid_tasks.scheduling.plan import load_plan
from grid_tasks.scheduling.rm_service import ReservationRefused
from grid_tasks.states import JobState
from grid_tasks.topology import load_topology

TOPOLOGY = ('[rm.rmA]\n[rm.rmA.node.node1]\nprocs = 4\n[rm.rmA.node.node2]\nprocs = 4\n'
            '[rm.rmB]\n[rm.rmB.node.node3]\nprocs = 2\n')
T0 = 2_000_000_000.0  # a fixed "now", far from the wall clock


BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


@pytest.fixture(scope="module", params=BACKENDS)
def db_url(request):
    """A migrated throwaway database (SQLite; PostgreSQL when its URL is set)."""
    server = None
    if request.param == "postgresql":
        server = postgres_test_url()
        if server is None:
            pytest.skip("GRID_TASKS_TEST_POSTGRES_URL is not set")
    with temporary_database(server, prefix="gt_rmsvc") as url:
        yield url


@pytest.fixture
def sessions(db_url, tmp_path):
    """A session factory on a clean database holding TOPOLOGY."""
    (tmp_path / "grid.toml").write_text(TOPOLOGY)
    engine = db.get_engine(db_url)
    factory = db.session_factory(engine)
    with db.session_scope(factory) as s:
        db.sync_topology(s, load_topology(tmp_path / "grid.toml"))
    yield factory
    clear_tables(engine)


def _submit(sessions, rsl: str, now: datetime, user: str = "alice") -> int:
    with db.session_scope(sessions) as s:
        return build_job(s, "rmA", rsl, lower(rsl)[0], {"user": user}, now, Outbox()).id


def _running(sessions, job_id: int, start: datetime, nodes: dict[str, int]) -> None:
    with db.session_scope(sessions) as s:
        row = db.repository.get_job(s, job_id)
        db.record_transition(s, row, JobState.ACTIVE, "started", start)
        row.start_time, row.nodes_allocated = start, nodes


def _reserve(sessions, name="g1", alloc=None, start=T0 + 100, duration=600.0, token="tok1",
             **kw):
    with db.session_scope(sessions) as s:
        return rm_service.reserve(s, "rmA", name=name, allocation=alloc or {"node1": 4},
                                  start=start, duration=duration, token=token,
                                  job_key="job-1", now=T0, **kw)


def _estimate(sessions, procs=4, duration=600.0, not_before=T0, **kw):
    with db.session_scope(sessions) as s:
        return rm_service.estimate(s, "rmA", procs=procs, duration=duration,
                                   not_before=not_before, now=T0, **kw)


def test_estimate_matches_the_core_and_respects_not_before(sessions):
    at = datetime.fromtimestamp(T0, timezone.utc)
    job = _submit(sessions, "&(executable=/bin/true)(count=6)(maxWallTime=10)", at)
    _running(sessions, job, at, {"node1": 4, "node2": 2})
    got = _estimate(sessions, procs=4, duration=300.0, limit=3)
    with db.session_scope(sessions) as s:
        plan = load_plan(s, "rmA", at)
        core = plan.scheduler.estimate(Job(id="x", tasks=4, walltime=300.0), T0, 3)
    assert got == [{"time": e.time, "allocation": dict(e.allocation)} for e in core]
    assert got[0]["time"] == T0 + 600  # the running job holds 6 of 8 for 10 minutes
    later = _estimate(sessions, procs=1, duration=60.0, not_before=T0 + 5000)
    assert later and all(e["time"] >= T0 + 5000 for e in later)
    assert _estimate(sessions, procs=9) == []  # more than the RM has: never


def test_reserve_then_estimate_shows_the_slot_taken(sessions):
    made = _reserve(sessions, alloc={"node1": 4, "node2": 4}, start=T0, duration=600.0)
    assert made["rm"] == "rmA" and made["name"] == "g1" and made["id"] > 0
    assert (made["start"], made["end"]) == (T0, T0 + 600)
    assert made["allocation"] == {"node1": 4, "node2": 4}
    assert _estimate(sessions, procs=1, duration=60.0)[0]["time"] == T0 + 600
    with db.session_scope(sessions) as s:
        row = rm_service.find_grid_reservation(s, "rmA", "g1")
        assert row.kind is db.ReservationKind.GRID and row.confirmed and row.token == "tok1"
        assert row.acl == {"jobs": []} and row.nodes == ["node1", "node2"]
        assert row.resources["procs_by_node"] == {"node1": 4, "node2": 4}
        assert row.resources["allow_early"] is False


def test_overlapping_reserve_is_refused_with_its_reason(sessions):
    _reserve(sessions, alloc={"node1": 3})
    with pytest.raises(ReservationRefused) as refused:
        _reserve(sessions, name="g2", alloc={"node1": 2}, token="tok2", start=T0 + 400)
    assert refused.value.reason == "busy"
    assert "node node1" in str(refused.value) and "g2 on rmA" in str(refused.value)
    # the other node, or after the first one ends, is fine
    _reserve(sessions, name="g3", alloc={"node2": 4}, token="tok3", start=T0 + 400)
    _reserve(sessions, name="g4", alloc={"node1": 4}, token="tok4", start=T0 + 700)


def test_reserve_refuses_running_jobs_walltime_and_unknown_nodes(sessions):
    at = datetime.fromtimestamp(T0, timezone.utc)
    job = _submit(sessions, "&(executable=/bin/true)(count=4)(maxWallTime=10)", at)
    _running(sessions, job, at, {"node1": 4})
    with pytest.raises(ReservationRefused, match="node node1 cannot hold"):
        _reserve(sessions, start=T0 + 500)
    _reserve(sessions, start=T0 + 600)  # the job's walltime is over by then
    with pytest.raises(ReservationRefused) as unknown:
        _reserve(sessions, name="g9", alloc={"node7": 1}, token="t9")
    assert unknown.value.reason == "unknown_node" and "node7" in str(unknown.value)


def test_reserve_is_idempotent_and_names_are_unique(sessions):
    first = _reserve(sessions)
    assert _reserve(sessions) == first  # same (rm, name, token): the same reservation
    with pytest.raises(ReservationRefused) as taken:
        _reserve(sessions, token="other", start=T0 + 5000)
    assert taken.value.reason == "taken"
    with db.session_scope(sessions) as s:
        assert len(list(s.scalars(select(db.Reservation)))) == 1


@pytest.mark.parametrize("kwargs, word", [
    ({"alloc": {"node1": 0}}, "allocation"), ({"duration": -1.0}, "duration"),
    ({"token": ""}, "token"), ({"start": T0 - 1000, "duration": 10.0}, "past"),
    ({"requester": {"shoe": "x"}}, "unknown keys"),
])
def test_bad_reserve_requests_are_refused_saying_why(sessions, kwargs, word):
    with pytest.raises(ReservationRefused, match=word):
        _reserve(sessions, **kwargs)


def test_unknown_rm_is_a_not_found_error(sessions):
    with db.session_scope(sessions) as s, pytest.raises(NotFoundError, match="rmZ"):
        rm_service.reserve(s, "rmZ", name="g", allocation={"n": 1}, start=T0, duration=1.0,
                           token="t", job_key="j", now=T0)


def test_release_frees_and_is_idempotent(sessions):
    _reserve(sessions, alloc={"node1": 4, "node2": 4}, start=T0)
    with db.session_scope(sessions) as s:
        assert rm_service.release(s, "rmA", name="g1", token="wrong") is False
    with db.session_scope(sessions) as s:
        assert rm_service.release(s, "rmA", name="g1", token="tok1") is True
    with db.session_scope(sessions) as s:
        assert rm_service.release(s, "rmA", name="g1") is False
    assert _estimate(sessions, procs=8, duration=60.0)[0]["time"] == T0


def test_estimate_counts_reservations_admitting_the_requester(sessions):
    from grid_tasks.ops.reservations import ResourceRequest, set_reservation

    at = datetime.fromtimestamp(T0, timezone.utc)
    with db.session_scope(sessions) as s:
        set_reservation(s, "rmA", ResourceRequest(0, 1, 0, ("node1", "node2")), start=at,
                        end=at + timedelta(hours=1), acl={"users": ["alice"]}, now=at)
    assert _estimate(sessions, procs=2)[0]["time"] == T0 + 3600
    assert _estimate(sessions, procs=2, requester={"user": "alice"})[0]["time"] == T0
    assert _estimate(sessions, procs=2, requester={"user": "bob", "host": "h"})[0]["time"] \
        == T0 + 3600


def test_reserve_agrees_with_estimate_inside_a_reservation_admitting_the_requester(sessions):
    from grid_tasks.ops.reservations import ResourceRequest, set_reservation

    at = datetime.fromtimestamp(T0, timezone.utc)
    with db.session_scope(sessions) as s:
        set_reservation(s, "rmA", ResourceRequest(0, 1, 0, ("node1", "node2")), start=at,
                        end=at + timedelta(hours=1), acl={"users": ["alice"]}, now=at)
    alice = {"user": "alice"}
    first = _estimate(sessions, procs=4, requester=alice)[0]
    assert first["time"] == T0  # alice may use her reservation now ...
    made = _reserve(sessions, alloc=first["allocation"], start=first["time"], duration=600.0,
                    requester=alice)  # ... and the RM holds what it estimated
    assert made["start"] == T0
    with pytest.raises(ReservationRefused) as refused:  # bob is not admitted
        _reserve(sessions, name="g-bob", token="tok-bob", alloc={"node2": 1}, start=T0,
                 duration=600.0, requester={"user": "bob"})
    assert refused.value.reason == "busy"
    # nested reservations still never overcommit the reservation they draw from
    second = _estimate(sessions, procs=4, requester=alice)[0]
    _reserve(sessions, name="g2", token="tok2", alloc=second["allocation"],
             start=second["time"], duration=600.0, requester=alice)
    with pytest.raises(ReservationRefused):
        _reserve(sessions, name="g3", token="tok3", alloc={"node1": 1}, start=T0,
                 duration=600.0, requester=alice)


def test_concurrent_reserves_never_overcommit(sessions):
    """Eight threads race for one node: the RM lock lets exactly one win."""
    outcomes: list[str] = []

    def attempt(i: int) -> None:
        try:
            _reserve(sessions, name=f"r{i}", alloc={"node1": 3}, token=f"t{i}")
            outcomes.append("ok")
        except ReservationRefused:
            outcomes.append("refused")

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(outcomes) == ["ok"] + ["refused"] * 7


# --- binding at submission ----------------------------------------------------------------

def test_a_job_binds_to_its_reservation_only(sessions):
    _reserve(sessions, start=T0 + 100)
    at = datetime.fromtimestamp(T0, timezone.utc)
    rsl = "&(executable=/bin/true)(count=4)(reservation=g1)"
    job = _submit(sessions, rsl, at)
    with db.session_scope(sessions) as s:
        row = rm_service.find_grid_reservation(s, "rmA", "g1")
        assert row.owner_job_id == job and row.acl["jobs"] == [str(job)]
        assert db.repository.get_job(s, job).early_start is False
    with pytest.raises(ReservationBindingError, match=f"bound to job {job}"):
        _submit(sessions, rsl, at)  # another job of the same user
    with pytest.raises(ReservationBindingError, match="'nope' on rmA does not exist"):
        _submit(sessions, "&(executable=/bin/true)(reservation=nope)", at)
    with db.session_scope(sessions) as s:  # nothing stored for the refused submissions
        assert [j.id for j in s.scalars(select(db.Job))] == [job]


def test_allow_early_and_ended_or_admin_reservations(sessions):
    from grid_tasks.ops.reservations import ResourceRequest, set_reservation

    _reserve(sessions, allow_early=True)
    at = datetime.fromtimestamp(T0, timezone.utc)
    job = _submit(sessions, "&(executable=/bin/true)(reservation=g1)", at)
    with db.session_scope(sessions) as s:
        assert db.repository.get_job(s, job).early_start is True
        set_reservation(s, "rmA", ResourceRequest(0, 1, 0, ("node2",)), start=at,
                        end=at + timedelta(hours=1), acl={"users": ["alice"]}, now=at,
                        name="adm")
    with pytest.raises(ReservationBindingError, match="admin reservation"):
        _submit(sessions, "&(executable=/bin/true)(reservation=adm)", at)
    with db.session_scope(sessions) as s, pytest.raises(ReservationRefused) as not_grid:
        rm_service.release(s, "rmA", name="adm")
    assert not_grid.value.reason == "not_grid"
    late = at + timedelta(hours=2)
    with pytest.raises(ReservationBindingError, match="ended"):
        _submit(sessions, "&(executable=/bin/true)(reservation=g1)", late)


def test_release_unbinds_the_job(sessions):
    _reserve(sessions)
    at = datetime.fromtimestamp(T0, timezone.utc)
    job = _submit(sessions, "&(executable=/bin/true)(reservation=g1)", at)
    with db.session_scope(sessions) as s:
        assert rm_service.release(s, "rmA", name="g1", now=T0 + 1)
    with db.session_scope(sessions) as s:
        row = db.repository.get_job(s, job)
        assert row.early_start is True
        assert "unbound from grid reservation g1" in db.repository.job_history(s, job)[-1].reason
