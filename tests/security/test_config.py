"""Security settings from the environment and their Celery / redis-py mapping."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from grid_tasks.celery_app import celery_config, create_app
from grid_tasks.errors import ConfigError
from grid_tasks.security.config import CertReqs
from grid_tasks.security.connections import mask_url, redis_kwargs
from grid_tasks.settings import Settings


def test_signing_is_on_by_default_from_the_environment(tmp_path):
    s = Settings.from_env({"GRID_TASKS_STATE_DIR": str(tmp_path)})
    assert s.signing.enabled
    assert celery_config(s)["accept_content"] == ["auth"]


def test_signing_turned_off_explicitly_keeps_config_json(tmp_path):
    s = Settings.from_env({"GRID_TASKS_STATE_DIR": str(tmp_path), "GRID_TASKS_SIGNING": "0"})
    assert not s.signing.enabled
    conf = celery_config(s)
    assert conf["task_serializer"] == "json" and conf["accept_content"] == ["json"]
    assert "security_key" not in conf and "broker_use_ssl" not in conf


def test_signing_on_maps_to_auth_serializer_with_default_paths(tmp_path):
    s = Settings.from_env({"GRID_TASKS_STATE_DIR": str(tmp_path), "GRID_TASKS_SIGNING": "yes"})
    keys = tmp_path / "keys"
    assert (s.signing.key, s.signing.cert, s.signing.cert_store) == \
        (keys / "worker.key", keys / "worker.pem", keys / "certs")
    conf = celery_config(s)
    assert conf["task_serializer"] == "auth" and conf["accept_content"] == ["auth"]
    assert conf["result_accept_content"] == ["json"] and conf["result_serializer"] == "json"
    assert conf["security_key"] == str(keys / "worker.key")
    assert conf["security_cert_store"] == str(keys / "certs")
    assert Settings.from_env(s.to_env()) == s


def test_explicit_signing_paths_and_round_trip(tmp_path):
    env = {"GRID_TASKS_STATE_DIR": str(tmp_path), "GRID_TASKS_SIGNING": "1",
           "GRID_TASKS_SIGNING_KEY": "/k/a.key", "GRID_TASKS_SIGNING_CERT": "/k/a.pem",
           "GRID_TASKS_SIGNING_CERT_STORE": "/k/store", "GRID_TASKS_GRIDMAP": "/etc/gm"}
    s = Settings.from_env(env)
    assert s.signing.key == Path("/k/a.key") and s.gridmap_file == Path("/etc/gm")
    assert Settings.from_env(s.to_env()) == s


def test_signing_without_key_files_is_a_config_error_naming_the_variable(tmp_path):
    s = Settings.from_env({"GRID_TASKS_STATE_DIR": str(tmp_path), "GRID_TASKS_SIGNING": "1"})
    with pytest.raises(ConfigError) as info:
        create_app(s)
    assert info.value.key == "GRID_TASKS_SIGNING_KEY"
    assert "keys init" in str(info.value) and "\n" not in str(info.value)


def test_tls_options_apply_to_rediss_urls_only(tmp_path):
    env = {"GRID_TASKS_BROKER_URL": "rediss://u:p@h:6380/1",
           "GRID_TASKS_RESULT_BACKEND": "redis://h:6379/2",
           "GRID_TASKS_REDIS_URL": "rediss://u:p@h:6380/3",
           "GRID_TASKS_REDIS_TLS_CA": str(tmp_path / "ca.pem"),
           "GRID_TASKS_REDIS_TLS_CERT": str(tmp_path / "c.pem"),
           "GRID_TASKS_REDIS_TLS_KEY": str(tmp_path / "c.key")}
    s = Settings.from_env(env)
    conf = celery_config(s)
    assert conf["broker_use_ssl"] == {
        "ssl_cert_reqs": ssl.CERT_REQUIRED, "ssl_check_hostname": True,
        "ssl_ca_certs": str(tmp_path / "ca.pem"), "ssl_certfile": str(tmp_path / "c.pem"),
        "ssl_keyfile": str(tmp_path / "c.key")}
    assert "redis_backend_use_ssl" not in conf  # plain redis:// backend
    assert redis_kwargs(s.redis_url, s.redis_tls)["ssl_ca_certs"] == str(tmp_path / "ca.pem")
    assert redis_kwargs("redis://h/1", s.redis_tls) == {}
    assert Settings.from_env(s.to_env()) == s


def test_rediss_backend_and_relaxed_verification():
    s = Settings.from_env({"GRID_TASKS_BROKER_URL": "rediss://h:6380/1",
                           "GRID_TASKS_REDIS_TLS_CERT_REQS": "None"})
    assert s.result_backend.startswith("rediss://") and s.redis_tls.cert_reqs is CertReqs.NONE
    conf = celery_config(s)
    assert conf["redis_backend_use_ssl"] == {"ssl_cert_reqs": ssl.CERT_NONE,
                                             "ssl_check_hostname": False}
    assert conf["broker_use_ssl"] == conf["redis_backend_use_ssl"]


@pytest.mark.parametrize("env, key, words", [
    ({"GRID_TASKS_SIGNING": "maybe"}, "GRID_TASKS_SIGNING", "expected 1/0"),
    ({"GRID_TASKS_REDIS_TLS_CERT_REQS": "strict"}, "GRID_TASKS_REDIS_TLS_CERT_REQS",
     "required, optional, none"),
    ({"GRID_TASKS_REDIS_TLS_CERT": "/c.pem"}, "GRID_TASKS_REDIS_TLS_KEY", "go together"),
])
def test_bad_security_settings_name_the_variable(env, key, words):
    with pytest.raises(ConfigError) as info:
        Settings.from_env(env)
    assert info.value.key == key and words in str(info.value)


def test_mask_url_hides_only_the_password():
    assert mask_url("redis://grid:s3cret@127.0.0.1:7000/3") == "redis://grid:***@127.0.0.1:7000/3"
    assert mask_url("rediss://:pw@h/1") == "rediss://:***@h/1"
    assert mask_url("redis://h:1/0") == "redis://h:1/0"
