"""A node daemon on another host: its own network namespace, reached over a veth link only.

Issue 20's proof that trust does not hang on sharing a host: the node daemon of
``rmA/node1`` runs inside a fresh network namespace (``ip netns exec``) whose only
way out is a veth pair (10.200.x.1 here, 10.200.x.2 there).  The grid's password-
protected redis-server listens on the root side's address alone; the scheduler and
gatekeeper run in the root namespace with the scheduler key; the node holds a key
directory of its own with just ``node.key``/``node.pem`` and the trust store.

The node still gets a database URL: today a node daemon writes its jobs' SQL
reports itself (removing the database credential from nodes is a separate step).
It is PostgreSQL relayed over the link when ``GRID_TASKS_TEST_POSTGRES_URL`` is
set, else a SQLite file (same filesystem: a network namespace shares the mounts).

Shown: (a) a job submitted the normal way (``Grid.submit`` with the user key ->
gatekeeper -> iteration -> scheduler-signed launch) runs on the namespaced node and
sees the namespace's address, not ours; (b) a launch signed by the user key, pushed
raw into the node's queue from the root namespace, is refused and counted.
"""

from __future__ import annotations

import datetime as dt
import getpass
import os
import shutil
from contextlib import ExitStack
from pathlib import Path

import pytest
import redis
from sqlalchemy.engine import make_url

from grid_tasks import db
from grid_tasks.db.testing import postgres_test_url, temporary_database
from grid_tasks.embedded.redis_server import RedisServer
from grid_tasks.embedded.stack import grid_tasks_command, prepare_database
from grid_tasks.embedded.supervisor import Supervisor, leftover
from grid_tasks.faults.harness import until
from grid_tasks.client import Grid, JobStatus
from grid_tasks.gram.tasks import LAUNCH
from grid_tasks.node.registry import NodeRegistry
from grid_tasks.security.config import SigningSettings
from grid_tasks.security.refusals import counts
from grid_tasks.security.role_keys import GridKeys, ensure_grid_keys
from grid_tasks.security.roles import Role
from grid_tasks.settings import Settings
from grid_tasks.states import JobState
from grid_tasks.topology import load_topology
from tests.conftest import CONFIG_DIR
from tests.security.netns import IP, Link, link_exists, namespace_exists, network_namespace, \
    tcp_relay
from tests.security.test_roles_live import _launch_body, _push, _sealed

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
    pytest.mark.skipif(IP is None, reason="no `ip` command (iproute2)"),
]

TOPOLOGY = """\
[rm.rmA]
policy_file = "{policy}"

[rm.rmA.node.node1]
procs = 2
memory_mb = 1024
disk_mb = 1000
swap_mb = 0
"""


def _node_key_dir(keys: GridKeys, directory: Path) -> SigningSettings:
    """A copy of the node's key and the trust store, and nothing else."""
    directory.mkdir(mode=0o700)
    for source in (keys.node.key, keys.node.cert):
        shutil.copy2(source, directory / source.name)
    shutil.copytree(keys.node.cert_store, directory / "certs")
    return SigningSettings(True, directory / keys.node.key.name,
                           directory / keys.node.cert.name, directory / "certs")


def _database(stack: ExitStack, link: Link) -> str:
    """A fresh database the namespaced node can reach: PostgreSQL through a relay on the
    link (the server may listen on loopback only), else a SQLite file."""
    url = stack.enter_context(temporary_database(postgres_test_url()))
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return url
    port = stack.enter_context(tcp_relay(link.root_addr,
                                         (parsed.host or "127.0.0.1", parsed.port or 5432)))
    return parsed.set(host=link.root_addr, port=port).render_as_string(hide_password=False)


def _settings(stack: ExitStack, link: Link, tmp: Path) -> Settings:
    """The grid: Redis on the link's root side only (with a password), one RM, one node."""
    server = stack.enter_context(RedisServer(tmp / "redis", host=link.root_addr))
    topology = tmp / "grid.toml"
    topology.write_text(TOPOLOGY.format(policy=CONFIG_DIR / "demo.cfg"))
    settings = Settings(
        broker_url=server.url(1), result_backend=server.url(2), redis_url=server.url(3),
        database_url=_database(stack, link), state_dir=tmp / "state", topology_file=topology,
        heartbeat_interval=0.5, heartbeat_ttl=3.0, visibility_timeout=30.0, single_user=True)
    assert prepare_database(settings, load_topology(topology))
    return settings


def _env(settings: Settings, signing: SigningSettings, **changes: object) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRID_TASKS_")}
    env.update(settings.replace(signing=signing, **changes).to_env())
    env.update({"PYTHONUNBUFFERED": "1", "GRID_TASKS_LAUNCH_TIMEOUT": "5"})
    return env


def _start(supervisor: Supervisor, link: Link, settings: Settings, keys: GridKeys,
           tmp: Path) -> None:
    """The scheduler (with the gatekeepers) here, the node daemon inside the namespace."""
    supervisor.spawn("scheduler", grid_tasks_command(
        "worker", "--scheduler", "--gatekeepers", "--no-check", "-l", "WARNING"),
        env=_env(settings, keys.signing(Role.SCHEDULER)))
    node_signing = _node_key_dir(keys, tmp / "node-keys")
    assert sorted(p.name for p in (tmp / "node-keys").iterdir()) == \
        ["certs", "node.key", "node.pem"]
    node_env = _env(settings, node_signing, state_dir=tmp / "node-state")
    assert not any(str(keys.scheduler.key) in v or str(keys.user.key) in v
                   for v in node_env.values())
    child = supervisor.spawn("node1", link.exec_argv(grid_tasks_command(
        "worker", "--rm", "rmA", "--node", "node1", "--no-check", "-l", "WARNING")),
        env=node_env)
    try:
        NodeRegistry.from_url(settings.redis_url, settings.heartbeat_ttl) \
            .wait_alive([("rmA", "node1")], timeout=30)
    except Exception:
        raise AssertionError(f"the namespaced node did not register:\n{child.log_tail(20)}")


def _run_job(settings: Settings, keys: GridKeys) -> tuple[JobStatus, str]:
    """A job submitted through the one door with the user key; its status and output."""
    grid = Grid(settings.replace(signing=keys.signing(Role.USER)))
    try:
        job = grid.submit(f"&(executable={IP})(arguments=-o -4 addr show)", rm="rmA")
        status = job.wait(timeout=30)
        return status, job.output()
    finally:
        grid.close()


@pytest.mark.slow  # over 15 s: the 20-minute CI budget (run with -m slow)
def test_a_node_in_its_own_network_namespace(tmp_path):
    keys = ensure_grid_keys(tmp_path / "keys", getpass.getuser(),
                            now=dt.datetime.now(dt.timezone.utc))
    supervisor = Supervisor(tmp_path / "logs")
    with ExitStack() as stack:
        link = stack.enter_context(network_namespace())
        settings = _settings(stack, link, tmp_path)
        assert link.root_addr in settings.broker_url and "127.0.0.1" not in settings.broker_url
        try:
            _start(supervisor, link, settings, keys, tmp_path)
            # (b) first, so the job of (a) also shows the node still serves after it
            marker = tmp_path / "user-signed.marker"
            forged = _launch_body(settings, 990, marker)
            _push(settings, LAUNCH, _sealed(keys, Role.USER, forged), signed=True)
            status, output = _run_job(settings, keys)
            assert status.state is JobState.DONE, (status, output)
            assert list(status.nodes) == ["node1"]
            assert f"inet {link.ns_addr}/30" in output, output
            assert link.root_addr not in output, "the job ran in the root namespace"
            store = redis.Redis.from_url(settings.redis_url)
            try:
                assert until(lambda: counts(store), 10, "the refusal counted") == {"role": 1}
            finally:
                store.close()
            assert not marker.exists(), "a launch signed by a user key ran on the node"
        finally:
            pids = supervisor.all_pids()
            supervisor.stop_all(timeout=10)
            db.dispose_engines()
    assert leftover(pids) == [], "daemon processes survived teardown"
    assert not namespace_exists(link.namespace) and not link_exists(link.root_if), \
        "the namespace or its link was left behind"
