"""Settings from GRID_TASKS_* variables: defaults, overrides, typed errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from grid_tasks.errors import ConfigError, GridTasksError
from grid_tasks.settings import Settings, rsl_max_substitution


def test_defaults_avoid_redis_db0_and_put_sqlite_in_state_dir():
    s = Settings.from_env({})
    assert s.broker_url.endswith("/1")
    assert s.result_backend == s.broker_url == s.redis_url
    assert s.state_dir == Path(".state")
    assert s.database_url == "sqlite:///" + str(Path(".state") / "grid_tasks.db")
    assert s.topology_file.name == "grid.toml"
    assert s.heartbeat_ttl > s.heartbeat_interval


def test_xdg_state_home_is_used_when_no_state_dir(tmp_path):
    s = Settings.from_env({"XDG_STATE_HOME": str(tmp_path)})
    assert s.state_dir == tmp_path / "grid_tasks"
    assert str(tmp_path / "grid_tasks" / "grid_tasks.db") in s.database_url


def test_overrides_and_round_trip_through_env(tmp_path):
    env = {
        "GRID_TASKS_BROKER_URL": "amqp://guest:guest@127.0.0.1:5672//",
        "GRID_TASKS_REDIS_URL": "redis://:pw@127.0.0.1:7000/3",
        "GRID_TASKS_STATE_DIR": str(tmp_path),
        "GRID_TASKS_TOPOLOGY": str(tmp_path / "t.toml"),
        "GRID_TASKS_HEARTBEAT_INTERVAL": "0.5",
        "GRID_TASKS_HEARTBEAT_TTL": "1.5",
        "GRID_TASKS_RSL_MAX_SUBSTITUTION": "4096",
    }
    s = Settings.from_env(env)
    assert s.rsl_max_substitution == 4096
    # RabbitMQ cannot store results: the backend falls back to the Redis URL.
    assert s.result_backend == "redis://:pw@127.0.0.1:7000/3"
    assert s.heartbeat_interval == 0.5 and s.heartbeat_ttl == 1.5
    assert s.topology_file == tmp_path / "t.toml"
    assert Settings.from_env(s.to_env()) == s
    assert s.replace(heartbeat_ttl=9.0).heartbeat_ttl == 9.0


def test_ttl_defaults_to_under_two_intervals():
    # A killed node must read Unknown within two intervals of its last beat, so the
    # default TTL stays below two intervals but well above one (a late beat is fine).
    s = Settings.from_env({"GRID_TASKS_HEARTBEAT_INTERVAL": "3"})
    assert s.heartbeat_ttl == pytest.approx(5.4)
    assert 1.5 < Settings().heartbeat_ttl / Settings().heartbeat_interval < 2


@pytest.mark.parametrize(
    "var, value, words",
    [
        ("GRID_TASKS_HEARTBEAT_INTERVAL", "soon", "number of seconds"),
        ("GRID_TASKS_HEARTBEAT_INTERVAL", "-2", "positive"),
        ("GRID_TASKS_HEARTBEAT_TTL", "nan", "positive"),
        ("GRID_TASKS_HEARTBEAT_TTL", "1", "must exceed"),
        ("GRID_TASKS_BROKER_URL", "localhost:6379", "not a URL"),
        ("GRID_TASKS_BROKER_URL", "kafka://x", "unsupported scheme"),
        ("GRID_TASKS_REDIS_URL", "redis://host:notaport/1", "malformed URL"),
        ("GRID_TASKS_RESULT_BACKEND", "mongodb://x", "unsupported scheme"),
        ("GRID_TASKS_STATE_DIR", "  ", "empty"),
        ("GRID_TASKS_RSL_MAX_SUBSTITUTION", "1MiB", "whole number of bytes"),
        ("GRID_TASKS_RSL_MAX_SUBSTITUTION", "0", "positive"),
        ("GRID_TASKS_RSL_MAX_SUBSTITUTION", "-5", "positive"),
        ("GRID_TASKS_RSL_MAX_SUBSTITUTION", "1" * 5000, "at most 18 digits"),
    ],
)
def test_bad_values_name_the_variable(var, value, words):
    with pytest.raises(ConfigError) as info:
        Settings.from_env({var: value})
    err = info.value
    assert isinstance(err, GridTasksError)
    assert err.key == var
    assert var in str(err) and words in str(err)
    assert "\n" not in str(err)


def test_db_result_backend_is_accepted():
    s = Settings.from_env({"GRID_TASKS_RESULT_BACKEND": "db+sqlite:///r.db"})
    assert s.result_backend == "db+sqlite:///r.db"


def test_rsl_max_substitution_defaults_to_one_mib_and_reads_alone():
    assert Settings.from_env({}).rsl_max_substitution == 1 << 20 == Settings().rsl_max_substitution
    # `grid-tasks rsl check` reads it without the rest (a bad broker URL does not matter there)
    env = {"GRID_TASKS_RSL_MAX_SUBSTITUTION": " 2048 ", "GRID_TASKS_BROKER_URL": "nope"}
    assert rsl_max_substitution(env) == 2048
    assert rsl_max_substitution({}) == 1 << 20
