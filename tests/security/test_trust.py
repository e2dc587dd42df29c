"""The trust store's roles and subjects, and what a verified message tells its task."""

from __future__ import annotations

import datetime as dt
import shutil

import pytest
from celery.exceptions import SecurityError
from celery.security.certificate import Certificate
from celery.security.key import PrivateKey

from grid_tasks.security.keys import init_keys
from grid_tasks.security.role_keys import ensure_grid_keys
from grid_tasks.security.roles import DEFAULT_ROLES, Role, roles_for
from grid_tasks.security.signing import SIGNER_KEY, SignedSerializer
from grid_tasks.security.trust import TrustStore

NOW = dt.datetime.now(dt.timezone.utc)


def test_only_schedulers_launch_and_a_new_task_admits_only_services():
    assert roles_for("grid_tasks.gram.tasks.launch") == {Role.SCHEDULER}
    assert roles_for("grid_tasks.gram.tasks.launch_batch") == {Role.SCHEDULER}
    assert roles_for("grid_tasks.gram.gatekeeper.submit") == {Role.USER}
    assert roles_for("some.task.nobody.listed") == DEFAULT_ROLES == {Role.SCHEDULER}
    assert all(Role.OPERATOR not in roles_for(t) for t in ("grid_tasks.gram.tasks.launch",
                                                           "grid_tasks.gram.gatekeeper.submit"))


def test_roles_come_from_the_folder_a_certificate_is_in(tmp_path):
    keys = ensure_grid_keys(tmp_path / "k", "alice", now=NOW)
    store = TrustStore(keys.user.cert_store)
    by_subject = {s.subject: s.roles for s in store.signers()}
    assert by_subject == {"/O=grid_tasks/OU=user/CN=alice": {Role.USER},
                          "/O=grid_tasks/OU=scheduler/CN=scheduler": {Role.SCHEDULER},
                          "/O=grid_tasks/OU=node/CN=node": {Role.NODE},
                          "/O=grid_tasks/OU=operator/CN=operator": {Role.OPERATOR}}
    # one certificate in two role folders holds both roles
    shutil.copy(keys.user.cert, keys.user.cert_store / "node" / "alice.pem")
    both = {s.subject: s.roles for s in TrustStore(keys.user.cert_store).signers()}
    assert both["/O=grid_tasks/OU=user/CN=alice"] == {Role.USER, Role.NODE}


def test_a_certificate_directly_in_the_store_is_trusted_in_every_role(tmp_path):
    paths = init_keys(tmp_path, "host-a", now=NOW, key_size=2048)
    (signer,) = TrustStore(paths.cert_store).signers()
    assert signer.roles == set(Role) and signer.subject == "/O=grid_tasks/CN=host-a"


def _serializer(paths, store_root) -> SignedSerializer:
    return SignedSerializer(PrivateKey(paths.key.read_bytes()),
                            Certificate(paths.cert.read_text()), TrustStore(store_root))


def test_the_verified_signer_replaces_whatever_the_sender_claimed(tmp_path):
    keys = ensure_grid_keys(tmp_path / "k", "alice", now=NOW)
    alice = _serializer(keys.user, keys.user.cert_store)
    claimed = {SIGNER_KEY: {"subject": "/CN=root", "roles": ["scheduler"]}, "grid_task": "t"}
    sealed = alice.serialize([[1], {"rm": "rmA"}, claimed])
    args, kwargs, embed = alice.deserialize(sealed)
    assert (args, kwargs) == ([1], {"rm": "rmA"}) and embed["grid_task"] == "t"
    assert embed[SIGNER_KEY] == {"subject": "/O=grid_tasks/OU=user/CN=alice", "roles": ["user"]}


def test_a_user_may_not_send_remote_control_commands(tmp_path):
    keys = ensure_grid_keys(tmp_path / "k", "alice", now=NOW)
    shutdown = {"method": "shutdown", "arguments": {}, "destination": None}
    user = _serializer(keys.user, keys.user.cert_store)
    with pytest.raises(SecurityError, match="remote-control"):
        user.deserialize(user.serialize(shutdown))
    operator = _serializer(keys.operator, keys.user.cert_store)
    assert operator.deserialize(operator.serialize(shutdown))["method"] == "shutdown"
