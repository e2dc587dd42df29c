"""``grid-tasks keys init-grid``, ``keys init --role`` and ``keys trust --role``: what a
deployment makes its keys with, each certificate trusted in its role only."""

from __future__ import annotations

import getpass
import json
import os
import stat
from pathlib import Path

from celery.security.certificate import Certificate
from click.testing import CliRunner

from grid_tasks.cli import main
from grid_tasks.security.roles import Role
from grid_tasks.security.trust import TrustStore


def run(*args: str):
    clean = {k: None for k in os.environ if k.startswith("GRID_TASKS_")}
    return CliRunner().invoke(main, list(args), env=clean)


def _roles(store: Path, cert: Path) -> set[str]:
    """The roles ``store`` trusts ``cert``'s signer in (empty if it does not)."""
    signer = TrustStore(store).signer(Certificate(cert.read_text()).get_id())
    return set() if signer is None else {r.value for r in signer.roles}


def test_init_grid_gives_each_role_a_folder_and_keeps_what_exists(tmp_path):
    made = run("keys", "init-grid", str(tmp_path / "k"), "--user", "alice", "--json")
    assert made.exit_code == 0, made.output
    out = json.loads(made.output)
    store = Path(out["cert_store"])
    assert store == tmp_path / "k" / "certs"
    expected = {"scheduler": "scheduler/scheduler", "node": "node/node",
                "operator": "operator/operator", "user": "user/user-alice"}
    for role, stem in expected.items():
        row = out["roles"][role]
        assert row["key"] == str(tmp_path / "k" / f"{stem}.key")
        assert stat.S_IMODE(Path(row["key"]).stat().st_mode) == 0o600
        assert stat.S_IMODE(Path(row["key"]).parent.stat().st_mode) == 0o700
        assert row["subject"].startswith(f"/O=grid_tasks/OU={role}/CN=")
        assert row["env"]["GRID_TASKS_SIGNING_CERT_STORE"] == str(store)
        assert _roles(store, Path(row["cert"])) == {role}, role
    # a role's folder holds that role's pair and nothing else
    assert sorted(p.name for p in (tmp_path / "k" / "node").iterdir()) == \
        ["node.key", "node.pem"]
    assert out["roles"]["user"]["subject"] == "/O=grid_tasks/OU=user/CN=alice"
    before = {r: Path(row["key"]).read_bytes() for r, row in out["roles"].items()}
    again = run("keys", "init-grid", str(tmp_path / "k"), "--user", "alice")
    assert again.exit_code == 0, again.output
    assert "scheduler" in again.output and "trust store" in again.output
    assert {r: Path(row["key"]).read_bytes() for r, row in out["roles"].items()} == before


def test_init_grid_flat_is_the_layout_of_the_embedded_stack(tmp_path):
    made = run("keys", "init-grid", str(tmp_path), "--flat", "--json")
    assert made.exit_code == 0, made.output
    roles = json.loads(made.output)["roles"]
    assert roles["node"]["key"] == str(tmp_path / "node.key")
    assert roles["user"]["key"] == str(tmp_path / f"user-{getpass.getuser()}.key")


def test_init_and_trust_by_role(tmp_path):
    node = run("keys", "init", str(tmp_path / "a"), "--role", "node", "--name", "n1",
               "--key-size", "2048", "--json")
    assert node.exit_code == 0, node.output
    paths = json.loads(node.output)
    assert paths["key"] == str(tmp_path / "a" / "node" / "node.key")
    assert paths["subject"] == "/O=grid_tasks/OU=node/CN=n1" and paths["role"] == "node"
    assert (tmp_path / "a" / "certs" / "node" / "n1.pem").is_file()
    store = Path(paths["cert_store"])
    assert _roles(store, Path(paths["cert"])) == {"node"}

    sched = run("keys", "init", str(tmp_path / "b"), "--role", "scheduler", "--name", "s1",
                "--key-size", "2048")
    assert sched.exit_code == 0, sched.output
    sched_cert = tmp_path / "b" / "scheduler" / "scheduler.pem"
    trusted = run("keys", "trust", str(sched_cert), "--store", str(store), "--role", "scheduler")
    assert trusted.exit_code == 0 and "(role scheduler)" in trusted.output, trusted.output
    assert _roles(store, sched_cert) == {"scheduler"}

    # a user's certificate trusted as a user is no scheduler
    user = run("keys", "init", str(tmp_path / "c"), "--role", "user", "--key-size", "2048",
               "--json")
    assert user.exit_code == 0, user.output
    user_cert = Path(json.loads(user.output)["cert"])
    assert user_cert == tmp_path / "c" / "user" / f"user-{getpass.getuser()}.pem"
    assert run("keys", "trust", str(user_cert), "--store", str(store),
               "--role", "user").exit_code == 0
    assert _roles(store, user_cert) == {Role.USER.value}
    # without --role, the store itself: every role (the operator's explicit choice)
    legacy = run("keys", "init", str(tmp_path / "d"), "--key-size", "2048")
    assert legacy.exit_code == 0, legacy.output
    everyone = run("keys", "trust", str(tmp_path / "d" / "worker.pem"), "--store", str(store))
    assert "(in every role)" in everyone.output
    assert _roles(store, tmp_path / "d" / "worker.pem") == {r.value for r in Role}


def test_unknown_role_is_a_usage_error(tmp_path):
    result = run("keys", "init", str(tmp_path), "--role", "root")
    assert result.exit_code == 2 and "'root' is not one of" in result.output
    assert not (tmp_path / "root.key").exists()
