"""The broker treats a Slurm cluster like a native RM: a real private Slurm cluster beside a
native RM, a real scheduler worker answering the estimate/reserve/release/capacities tasks
by name, the token store on the private Redis and SQLite.  Co-reservation across both
kinds with one common start, ``showstart`` across RMs and on the Slurm RM alone."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from sqlalchemy import select

from grid_tasks import db
from grid_tasks.broker.gridres import grid_start
from grid_tasks.broker.live import Broker
from grid_tasks.broker.remote import PRUNE
from grid_tasks.celery_app import SCHEDULER_QUEUE
from grid_tasks.cli.planning import showstart
from grid_tasks.embedded.slurm_cluster import SlurmSite
from grid_tasks.embedded.stack import prepare_database
from grid_tasks.legion.collection import Requester
from grid_tasks.node.registry import NodeRegistry
from grid_tasks.ops.planning import show_start
from grid_tasks.rsl.lower import SubjobRequest
from grid_tasks.topology import load_topology
from tests.slurm_site import NEEDS_SLURM, site_fixture

pytestmark = NEEDS_SLURM
ME = Requester("tester", (), "localhost")
BOTH = ("+(&(executable=/bin/true)(count=2)(resourceManagerContact=rmA)(label=a)(maxWallTime=1))"
        "(&(executable=/bin/true)(count=3)(resourceManagerContact=rmS)(label=s)(maxWallTime=1))")


site = site_fixture({"s": 2})


@pytest.fixture
def live(site, tmp_path, settings, celery_app_factory, in_process_worker) -> Iterator[Any]:
    """Native rmA (node1, node2 of 2 procs, alive) and Slurm rmS; a scheduler worker."""
    (tmp_path / "grid.toml").write_text(
        '[rm.rmA]\n[rm.rmA.node.node1]\nprocs = 2\n[rm.rmA.node.node2]\nprocs = 2\n'
        f'[rm.rmS]\nkind = "slurm"\nslurm_conf = "{site["s"].conf}"\npartition = "all"\n')
    settings = settings.replace(topology_file=tmp_path / "grid.toml", heartbeat_ttl=120.0)
    prepare_database(settings, load_topology(settings.topology_file))
    app = celery_app_factory(settings)
    client = redis.Redis.from_url(settings.redis_url)
    for node in ("node1", "node2"):
        NodeRegistry(client, 120.0).register("rmA", node, {}, {}, "test", time.time())
    in_process_worker(app, queues=[SCHEDULER_QUEUE], concurrency=2)
    broker = Broker.for_settings(settings, app, timeout=20.0, lead=3.0)
    yield broker, settings, db.session_factory(db.get_engine(settings.database_url))
    broker.close()
    client.close()
    db.dispose_engines()


def slurm_reservation(site: SlurmSite, name: str) -> str:
    done = site["s"].run("scontrol", "-o", "show", "reservation", name)
    return done.stdout if done.returncode == 0 else ""


def test_a_coreservation_spans_a_native_rm_and_a_slurm_cluster(site, live):
    broker, _settings, sessions = live
    co = broker.coreserve(broker.components(BOTH, ME), now=time.time(), requester=ME)
    parts = {p.rm: p for p in co.parts}
    assert set(parts) == {"rmA", "rmS"} and all(p.start == co.start for p in co.parts)
    assert dict(parts["rmS"].allocation) == {"all": 3}
    assert sum(dict(parts["rmA"].allocation).values()) == 2
    shown = slurm_reservation(site, f"gt-rmS-{parts['rmS'].name}")
    begins = datetime.fromtimestamp(co.start).replace(microsecond=0).isoformat()
    assert f"StartTime={begins}" in shown and "Duration=00:01:00" in shown
    assert "CoreCnt=3" in shown and "FLEX" not in shown  # a common start: no early start
    assert broker.store.capacities()["rmS/all"] == 4  # from the Slurm RM's capacities task
    with db.session_scope(sessions) as session:
        rows = session.scalars(select(db.Reservation)).all()
        assert sorted((r.rm, r.token is not None, bool(r.resources.get("tokens_confirmed")))
                      for r in rows) == [("rmA", True, True), ("rmS", True, True)]
    # the prune task (as beat runs it) keeps an old reservation whose tokens the store
    # holds, and deletes it, in Slurm too, once they are gone
    with db.session_scope(sessions) as session:
        for row in session.scalars(select(db.Reservation).where(db.Reservation.rm == "rmS")):
            row.created_at = row.created_at - timedelta(minutes=5)
    prune = broker.app.tasks[PRUNE]
    assert prune.apply(kwargs={"rm": "rmS"}).get() == []
    assert slurm_reservation(site, f"gt-rmS-{parts['rmS'].name}")
    broker.release_tokens(co.job_key)
    assert prune.apply(kwargs={"rm": "rmS"}).get() == [parts["rmS"].name]
    assert slurm_reservation(site, f"gt-rmS-{parts['rmS'].name}") == ""
    assert broker.release(co) == 1  # the native part; the Slurm one is gone already
    early = broker.coreserve(broker.components(BOTH, ME), now=time.time(), requester=ME,
                             allow_early=True)
    (slurm_part,) = [p for p in early.parts if p.rm == "rmS"]
    assert "Flags=FLEX" in slurm_reservation(site, f"gt-rmS-{slurm_part.name}")
    assert broker.release(early) == 2


def test_showstart_asks_the_slurm_rm_like_a_native_one(live):
    broker, settings, sessions = live
    now = time.time()
    report = grid_start(broker, [SubjobRequest(index=0, executable="", count=2,
                                               max_wall_time_s=600)],
                        now=now, requester=ME)
    answers = {r["rm"]: r for r in report["rms"]}
    assert set(answers) == {"rmA", "rmS"} and answers["rmS"]["answer"] == "ok"
    assert answers["rmS"]["estimates"][0]["allocation"] == {"all": 2}
    topology = load_topology(settings.topology_file)
    with db.session_scope(sessions) as session:
        alone = show_start(session, "3@10:00", datetime.now().astimezone(), rm="rmS",
                           topology=topology)
        never = show_start(session, "9@10:00", datetime.now().astimezone(), rm="rmS",
                           topology=topology)
    assert alone.rm == "rmS" and alone.estimates[0].allocation == {"all": 3}
    assert abs(alone.estimates[0].start.timestamp() - now) < 30
    assert never.estimates == [] and "can never hold 9 processors" in never.note
    out = CliRunner().invoke(showstart, ["-r", "rmS", "2@10:00", "--json"], env=settings.to_env())
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["estimates"][0]["allocation"] == {"all": 2}
