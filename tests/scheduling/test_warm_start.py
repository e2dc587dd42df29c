"""A worker that iterates RMs loads their idle queues before its first task: the first
iteration then reads no row of an unchanged queue; an RM that cannot be loaded is left
to its first iteration."""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone
from types import SimpleNamespace

import pytest

from grid_tasks import db
from grid_tasks.celery_app import create_app
from grid_tasks.embedded.stack import prepare_database
from grid_tasks.gram.records import Outbox
from grid_tasks.gram.submission import insert_job
from grid_tasks.node.registry import NodeRegistry
from grid_tasks.rsl import lower
from grid_tasks.scheduling import idle_queue, warm_start
from grid_tasks.scheduling.iteration import run_iteration
from grid_tasks.services import Services
from grid_tasks.topology import load_topology


@pytest.fixture
def services(settings):
    prepare_database(settings, load_topology(settings.topology_file))
    services = Services(settings)
    registry = NodeRegistry(services.redis, 3600)
    for node in load_topology(settings.topology_file).iter_nodes():
        registry.register(node.rm, node.name, {}, {}, "test", time.time())
    yield services
    idle_queue.forget("rmA")
    db.dispose_engines(settings.database_url)


def _submit(services, count: int) -> None:
    rsl = "&(executable=/bin/true)(count=8)"  # the whole of rmA: one at a time
    with db.session_scope(services.sessions) as s:
        for _ in range(count):
            insert_job(s, "rmA", rsl, lower(rsl)[0], {"user": "u"},
                       datetime.now(timezone.utc), Outbox())


def test_the_first_iteration_after_a_warm_start_reads_no_row(services, monkeypatch):
    _submit(services, 60)
    idle_queue.forget("rmA")  # a new process: nothing kept
    took = warm_start.warm_queues(services, ["rmA", "nosuch"])
    assert list(took) == ["rmA"]  # the unknown RM is left out
    image = next(i for k, i in idle_queue._images.items() if k[1] == "rmA")  # noqa: SLF001
    assert len(image.jobs) == 60 and image.cache.columns is not None  # ranked once
    monkeypatch.setattr(idle_queue, "read_all", lambda *a: pytest.fail("the queue was read"))
    monkeypatch.setattr(idle_queue, "read_rows", lambda *a: pytest.fail("rows were read"))
    app = create_app(services.settings)
    try:
        run_iteration(app, "rmA", sessions=services.sessions, redis=services.redis,
                      registry=NodeRegistry(services.redis, 3600))
    finally:
        app.close()


def test_a_worker_warms_the_rms_whose_iteration_queues_it_consumes(services, monkeypatch,
                                                                    caplog):
    warmed = []
    monkeypatch.setattr(warm_start, "warm_queues",
                        lambda svc, rms: warmed.extend(rms) or {rm: 0.5 for rm in rms})
    monkeypatch.setattr(warm_start, "services_for", lambda app: services)
    app = SimpleNamespace(grid_settings=services.settings, amqp=SimpleNamespace(
        queues=SimpleNamespace(consume_from={"iterate.rmB": 1, "scheduler": 1,
                                             "iterate.rmA": 1})))
    with caplog.at_level(logging.INFO, logger=warm_start.__name__):
        warm_start._at_worker_setup(instance=SimpleNamespace(app=app))  # noqa: SLF001
    assert warmed == ["rmA", "rmB"] and "rmA 0.50 s" in caplog.text
    warmed.clear()
    app.amqp.queues.consume_from = {"gatekeeper.rmA": 1}  # no iterations here: nothing
    warm_start._at_worker_setup(instance=SimpleNamespace(app=app))  # noqa: SLF001
    assert warmed == []


def test_a_slurm_cluster_is_not_loaded(services, tmp_path, caplog):
    topology = tmp_path / "grid.toml"
    topology.write_text(services.settings.topology_file.read_text()
                        + '\n[rm.cluster]\nkind = "slurm"\nslurm_conf = "/etc/slurm/slurm.conf"\n')
    mine = Services(services.settings.replace(topology_file=topology))
    with caplog.at_level(logging.WARNING, logger=warm_start.__name__):
        assert warm_start.warm_queues(mine, ["cluster"]) == {}
    assert caplog.text == ""  # skipped as Slurm's, not failed
