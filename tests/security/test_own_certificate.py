"""A process whose own certificate is expired or not its key's does not start signing:
every peer would refuse what it sends, so it says so at once, naming the subject."""

from __future__ import annotations

import datetime as dt

import pytest

from grid_tasks.celery_app import create_app
from grid_tasks.errors import ConfigError
from grid_tasks.security.config import SigningSettings
from grid_tasks.security.role_keys import init_role_key
from grid_tasks.security.roles import Role
from grid_tasks.settings import Settings

NOW = dt.datetime.now(dt.timezone.utc)


def _settings(key, cert, store) -> Settings:
    return Settings(signing=SigningSettings(True, key, cert, store))


def test_an_expired_certificate_is_refused_naming_its_subject(tmp_path):
    old = init_role_key(tmp_path, Role.USER, "alice", now=NOW - dt.timedelta(days=30), days=2)
    with pytest.raises(ConfigError, match=r"CN=alice.*expired on") as info:
        create_app(_settings(old.key, old.cert, old.cert_store))
    assert info.value.key == "GRID_TASKS_SIGNING_CERT"


def test_a_certificate_of_another_key_is_refused(tmp_path):
    mine = init_role_key(tmp_path / "a", Role.USER, "alice", now=NOW)
    other = init_role_key(tmp_path / "b", Role.USER, "bob", now=NOW)
    with pytest.raises(ConfigError, match="is not the key of"):
        create_app(_settings(mine.key, other.cert, mine.cert_store))


def test_an_expired_peer_certificate_in_the_store_is_left_out_not_fatal(tmp_path):
    from grid_tasks.security.trust import TrustStore

    init_role_key(tmp_path, Role.USER, "alice", now=NOW)
    init_role_key(tmp_path, Role.NODE, "old-node", now=NOW - dt.timedelta(days=30), days=2)
    subjects = [s.subject for s in TrustStore(tmp_path / "certs").signers()]
    assert subjects == ["/O=grid_tasks/OU=user/CN=alice"]
