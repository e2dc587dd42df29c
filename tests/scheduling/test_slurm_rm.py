"""The Slurm RM's side of the metascheduler protocol against a real private cluster and a
real SQLite grid database: estimate by ``sbatch --test-only``, a reservation for the
mapped user over the whole walltime in minutes (FLEX for an early start), idempotent per
(rm, name, token) with the native grid row, refusals that leave nothing, and deletion as
soon as its job ends (Slurm refuses while the job runs)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import select

from grid_tasks import db
from grid_tasks.embedded.slurm_cluster import SlurmSite
from grid_tasks.errors import NotFoundError
from grid_tasks.gram.records import Outbox
from grid_tasks.gram.submission import build_job
from grid_tasks.legion.refusals import ReservationRefused
from grid_tasks.rsl import lower
from grid_tasks.scheduling.rm_kinds import backend_for
from grid_tasks.scheduling.slurm_rm import SlurmRM, slurm_of
from grid_tasks.slurm import SlurmClient
from grid_tasks.states import JobState
from grid_tasks.topology import load_topology
from grid_tasks.utc import from_epoch
from tests.slurm_site import NEEDS_SLURM

pytestmark = NEEDS_SLURM


class Grid:
    """A Slurm cluster ``s`` (2 nodes of 2 CPUs) as RM ``rmS`` of a grid in SQLite."""

    def __init__(self, site: SlurmSite, base: Any) -> None:
        self.cluster = site["s"]
        (base / "grid.toml").write_text(f'[rm.rmS]\nkind = "slurm"\nslurm_conf = '
                                        f'"{self.cluster.conf}"\npartition = "all"\n')
        self.topology = load_topology(base / "grid.toml")
        url = f"sqlite:///{base / 'grid.db'}"
        db.migrate(url)
        self.sessions = db.session_factory(db.get_engine(url))
        with db.session_scope(self.sessions) as session:
            db.sync_topology(session, self.topology)
        self.rm = backend_for("rmS", self.topology)
        assert isinstance(self.rm, SlurmRM)

    def call(self, method: str, **kw: Any) -> Any:
        """One call in one transaction, as a task makes it."""
        with db.session_scope(self.sessions) as session:
            return getattr(self.rm, method)(session, **kw)

    def reserve(self, name: str, start: float, duration: float = 61.0, procs: int = 2,
                token: str = "tok", **kw: Any) -> dict[str, Any]:
        return self.call("reserve", name=name, allocation={"all": procs}, start=start,
                         duration=duration, token=token, job_key=f"job-{name}",
                         now=time.time(), **kw)

    def row(self, name: str) -> Any:
        with db.session_scope(self.sessions) as session:
            found = session.scalars(select(db.Reservation).where(
                db.Reservation.name == name)).first()
            if found is not None:
                session.expunge(found)
            return found

    def slurm(self, name: str) -> str:
        """``scontrol -o show reservation`` of ``name`` ('' when Slurm has none)."""
        done = self.cluster.run("scontrol", "-o", "show", "reservation", name)
        return done.stdout if done.returncode == 0 else ""


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Grid]:
    with SlurmSite(tmp_path_factory.mktemp("slurm") / "site", {"s": 2}) as site:
        made = Grid(site, tmp_path_factory.mktemp("grid"))
        yield made
        db.dispose_engines()


def test_estimate_is_slurms_test_only_answer_on_the_partition(grid):
    now = time.time()
    first = grid.call("estimate", procs=2, duration=90.0, not_before=now, now=now)
    assert len(first) == 1 and first[0]["allocation"] == {"all": 2}
    assert now <= first[0]["time"] < now + 30
    later = grid.call("estimate", procs=2, duration=90.0, not_before=now + 600, now=now)
    assert later[0]["time"] == now + 600  # never before not_before
    assert grid.call("estimate", procs=9, duration=60.0, not_before=now, now=now) == []
    with pytest.raises(NotFoundError):  # an RM the grid does not know, as natively
        with db.session_scope(grid.sessions) as session:
            SlurmRM("nope", grid.rm.client).estimate(session, procs=1, duration=60.0,
                                                     not_before=now, now=now)


def test_reserve_holds_the_whole_walltime_for_the_user_idempotently(grid):
    start = float(int(time.time()) + 600)
    made = grid.reserve("g1", start, duration=61.0)
    assert (made["rm"], made["name"], made["start"], made["end"], made["allocation"]) == \
        ("rmS", "g1", start, start + 61.0, {"all": 2})
    assert grid.reserve("g1", start, duration=61.0) == made  # a redelivered reserve
    shown = grid.slurm("gt-rmS-g1")
    assert "Duration=00:02:00" in shown  # 61 s: whole minutes, rounded up
    assert "Users=root" in shown and "CoreCnt=2" in shown and "Flags= " in shown
    row = grid.row("g1")
    assert (row.kind, row.token, row.confirmed, row.nodes) == (db.ReservationKind.GRID, "tok",
                                                               True, ["all"])
    assert slurm_of(row)["reservation"] == "gt-rmS-g1" and slurm_of(row)["user"] == "root"
    assert grid.call("mark_enacted", parts=[("g1", "tok"), ("gone", "x")]) == 1
    assert grid.row("g1").resources["tokens_confirmed"] is True
    with pytest.raises(ReservationRefused) as err:
        grid.reserve("g1", start, token="another")
    assert err.value.reason == "taken"
    assert grid.call("release", name="g1", token="another") is False
    assert grid.call("release", name="g1", token="tok") is True
    assert grid.row("g1") is None and grid.slurm("gt-rmS-g1") == ""
    assert grid.call("release", name="g1") is False


def test_an_early_start_is_flex_and_the_account_is_the_mapped_one(grid, throwaway_user):
    start = float(int(time.time()) + 900)
    grid.reserve("early", start, allow_early=True, account=throwaway_user.pw_name)
    shown = grid.slurm("gt-rmS-early")
    assert "Flags=FLEX" in shown and f"Users={throwaway_user.pw_name}" in shown
    assert grid.call("release", name="early") is True


def test_a_slot_slurm_refuses_leaves_no_row(grid):
    start = float(int(time.time()) + 1200)
    grid.reserve("whole", start, procs=4)
    with pytest.raises(ReservationRefused) as err:
        grid.reserve("more", start + 30, procs=2)
    assert err.value.reason == "busy" and "busy" in str(err.value)
    assert grid.row("more") is None and grid.slurm("gt-rmS-more") == ""
    assert grid.call("capacities") == {"all": 4}
    assert grid.call("release", name="whole") is True


def test_a_controller_that_is_down_is_a_typed_refusal(grid, tmp_path):
    conf = tmp_path / "gone.conf"
    conf.write_text("ClusterName=gone\nSlurmctldHost=localhost\nSlurmctldPort=1\n"
                    "SelectType=select/cons_tres\n"
                    "NodeName=g1 CPUs=1\nPartitionName=all Nodes=g1\n")
    down = SlurmRM("rmS", SlurmClient(str(conf), "all", timeout=0.5))
    now = time.time()
    with db.session_scope(grid.sessions) as session:
        with pytest.raises(ReservationRefused) as err:
            down.estimate(session, procs=1, duration=60.0, not_before=now, now=now)
    assert err.value.reason == "unavailable"
    with pytest.raises(ReservationRefused) as err:
        with db.session_scope(grid.sessions) as session:
            down.reserve(session, name="down", allocation={"all": 1}, start=now + 600,
                         duration=60.0, token="t", job_key="k", now=now)
    assert err.value.reason == "unavailable" and grid.row("down") is None


def test_released_while_its_job_runs_it_goes_as_soon_as_the_job_ends(grid):
    now = time.time()
    grid.reserve("busy", now, duration=120.0)
    jid = grid.cluster.run("sbatch", "--parsable", "--reservation=gt-rmS-busy", "-n2",
                           "--time=1", "--output=/dev/null", "--wrap=sleep 3").stdout.strip()
    deadline = time.monotonic() + 30
    while "RUNNING" not in grid.cluster.run("squeue", "-h", "-j", jid, "-o", "%T").stdout:
        assert time.monotonic() < deadline, "the job never ran in its reservation"
        time.sleep(0.2)
    assert grid.call("release", name="busy") is True  # Slurm refuses: marked, kept
    assert slurm_of(grid.row("busy"))["release_pending"] and grid.slurm("gt-rmS-busy")
    while grid.call("prune", now=time.time()) != ["busy"]:
        assert time.monotonic() < deadline + 30, "the reservation outlived its job"
        time.sleep(0.5)
    assert grid.row("busy") is None and grid.slurm("gt-rmS-busy") == ""


def test_prune_drops_ended_unconfirmed_and_orphaned_reservations(grid):
    now = time.time()
    grid.reserve("ended", now + 600)
    grid.reserve("halfmade", now + 700, token="lost")
    grid.reserve("kept", now + 800, token="held")
    grid.rm.client.reserve("gt-rmS-orphan", from_epoch(now + 900), 60, 1, "root")
    grid.rm.client.reserve("maint", from_epoch(now + 900), 60, 1, "root")
    with db.session_scope(grid.sessions) as session:
        for row in session.scalars(select(db.Reservation)):
            if row.name == "ended":
                row.end_time = from_epoch(now - 1)
            row.created_at = from_epoch(now) - timedelta(minutes=5)
    pruned = grid.call("prune", now=now, held=lambda row: row.token == "held")
    assert sorted(pruned) == ["ended", "gt-rmS-orphan", "halfmade"]
    assert grid.row("kept") is not None and grid.slurm("gt-rmS-kept")
    assert grid.slurm("maint")  # not this grid's: left alone
    assert grid.call("prune", now=now) == []  # without the token store, tokens prune nothing
    assert grid.call("record_start", name="kept", started=now + 803.5) == 3.5
    assert slurm_of(grid.row("kept"))["estimate_error_s"] == 3.5
    grid.rm.client.release("maint")
    assert grid.call("release", name="kept") is True


def test_a_reservation_goes_when_its_bound_job_ended(grid):
    start = float(int(time.time()) + 600)
    grid.reserve("bound", start)
    rsl = "&(executable=/bin/true)(count=2)(reservation=bound)"
    with db.session_scope(grid.sessions) as s:
        job = build_job(s, "rmS", rsl, lower(rsl)[0], {"user": "u"},
                        datetime.now(timezone.utc), Outbox()).id
    assert grid.row("bound").owner_job_id == job  # bound as on a native RM
    forgotten: list[tuple[str, str]] = []  # what the prune task releases tokens for

    def forget(row: Any) -> None:
        forgotten.append((row.name, row.token))

    assert grid.call("prune", now=time.time(), forget=forget) == []  # its job has not ended
    with db.session_scope(grid.sessions) as s:
        row = db.repository.get_job(s, job)
        for state in (JobState.ACTIVE, JobState.DONE):
            db.record_transition(s, row, state, "as the job path reports", datetime.now(timezone.utc))
    assert forgotten == []
    assert grid.call("prune", now=time.time(), forget=forget) == ["bound"]
    assert forgotten == [("bound", "tok")]  # its tokens go with it, long before its start
    assert grid.row("bound") is None and grid.slurm("gt-rmS-bound") == ""


def test_a_reservation_left_by_a_failed_transaction_is_replaced(grid):
    """Slurm made it, then the grid's commit failed (no row): a retried reserve succeeds."""
    start = float(int(time.time()) + 1500)
    grid.rm.client.reserve("gt-rmS-retried", from_epoch(start), 60, 1, "root")
    made = grid.reserve("retried", start, duration=120.0)
    assert made["name"] == "retried" and "Duration=00:02:00" in grid.slurm("gt-rmS-retried")
    assert grid.call("release", name="retried") is True
