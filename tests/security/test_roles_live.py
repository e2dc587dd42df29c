"""Trust per role, on a real node daemon: only a scheduler's signed launch starts a process.

The attack of issue 20: a launch message pushed straight into ``node.rmA.node1``
ran ``id`` as root for a job that does not exist.  Here every variant is pushed
raw into the node's queue of a real ``grid-tasks worker --rm rmA --node node1``
(signing switched on by its environment, holding only the node key), each trying
to create its own marker file; only the scheduler-signed one may.
"""

from __future__ import annotations

import datetime as dt

import redis

from grid_tasks.faults.harness import until
from grid_tasks.gram.tasks import LAUNCH
from grid_tasks.node.tasks import NODE_CHECK
from grid_tasks.security.refusals import counts
from grid_tasks.security.role_keys import GridKeys, ensure_grid_keys
from grid_tasks.security.roles import Role
from grid_tasks.selftest.forge import launch_body, push, sealed

QUEUE = "node.rmA.node1"


def _sealed(keys: GridKeys, role: Role, body: list) -> bytes:
    return sealed(keys.for_role(role), body)


def _push(settings, task: str, body: bytes | list, signed: bool) -> None:
    push(settings.broker_url, QUEUE, task, body, signed=signed)


def _launch_body(settings, job_id: int, marker, task: str = LAUNCH) -> list:
    return launch_body(settings, job_id, marker, task=task)


def test_a_node_runs_only_launches_signed_by_a_scheduler(settings, node_worker, tmp_path):
    keys = ensure_grid_keys(tmp_path / "keys", "alice", now=dt.datetime.now(dt.timezone.utc))
    node_worker("rmA", "node1", **settings.replace(signing=keys.signing(Role.NODE),
                                                   single_user=True).to_env())
    markers = {name: tmp_path / f"{name}.marker" for name in
               ("unsigned", "user", "node", "renamed", "scheduler")}
    _push(settings, LAUNCH, _launch_body(settings, 901, markers["unsigned"]), signed=False)
    for job, role in ((902, Role.USER), (903, Role.NODE)):
        body = _launch_body(settings, job, markers[role.value])
        _push(settings, LAUNCH, _sealed(keys, role, body), signed=True)
    # a scheduler's signed node check, re-headed as a launch: the body names its task
    renamed = _launch_body(settings, 904, markers["renamed"], task=NODE_CHECK)
    _push(settings, LAUNCH, _sealed(keys, Role.SCHEDULER, renamed), signed=True)
    # the control: what a scheduler really sends runs
    good = _launch_body(settings, 905, markers["scheduler"])
    _push(settings, LAUNCH, _sealed(keys, Role.SCHEDULER, good), signed=True)

    until(markers["scheduler"].exists, 30, "the scheduler-signed launch to run")
    for name in ("unsigned", "user", "node", "renamed"):
        assert not markers[name].exists(), f"a launch signed as {name!r} ran"
    store = redis.Redis.from_url(settings.redis_url)
    try:
        refused = until(lambda: (lambda c: c if sum(c.values()) >= 4 else None)(counts(store)),
                        10, "four refusals counted")
    finally:
        store.close()
    assert refused == {"unsigned": 1, "role": 2, "task_mismatch": 1}
