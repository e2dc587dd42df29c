"""The runtime's environment: every variable checked, typed errors naming it."""

from __future__ import annotations

import pytest

from grid_tasks.runtime import RuntimeEnvironmentError, intra_subjob_rank
from grid_tasks.runtime.env import RuntimeEnv, runtime_environment

URL = "redis://u:p@127.0.0.1:1/3"


def environ(**changes: str) -> dict[str, str]:
    env = {**runtime_environment(URL, "job-1", 2, "left"),
           "GRID_TASKS_RANK": "1", "GRID_TASKS_SIZE": "3"}
    env.update(changes)
    return {k: v for k, v in env.items() if v != "<unset>"}


def test_round_trip_of_the_control_side_variables() -> None:
    env = RuntimeEnv.from_environ(environ(GRID_TASKS_BARRIER_TIMEOUT="2.5"))
    assert (env.url, env.job, env.subjob, env.label, env.rank, env.size) == (
        URL, "job-1", 2, "left", 1, 3)
    assert env.barrier_timeout == 2.5 and env.receive_timeout is None
    with_timeout = runtime_environment(URL, "j", 0, "a", barrier_timeout=7)
    assert RuntimeEnv.from_environ({**with_timeout, "GRID_TASKS_RANK": "0",
                                    "GRID_TASKS_SIZE": "1"}).barrier_timeout == 7.0


def test_tls_variables_are_forwarded_only_for_tls_urls() -> None:
    control = {"GRID_TASKS_REDIS_TLS_CA": "/etc/ca.pem", "GRID_TASKS_DATABASE_URL": "secret"}
    tls = runtime_environment("rediss://u:p@h:1/3", "j", 0, "a", tls_env=control)
    assert tls["GRID_TASKS_REDIS_TLS_CA"] == "/etc/ca.pem"
    assert "GRID_TASKS_DATABASE_URL" not in tls  # nothing else of the control side leaks
    assert "GRID_TASKS_REDIS_TLS_CA" not in runtime_environment(URL, "j", 0, "a",
                                                                tls_env=control)


@pytest.mark.parametrize("variable,value,why", [
    ("GRID_TASKS_RUNTIME_URL", "<unset>", "not set"),
    ("GRID_TASKS_RUNTIME_URL", "localhost", "not a Redis URL"),
    ("GRID_TASKS_COALLOC_ID", "<unset>", "not set"),
    ("GRID_TASKS_COALLOC_ID", "a*b", "invalid coallocated job id"),
    ("GRID_TASKS_SUBJOB_INDEX", "x", "not an integer"),
    ("GRID_TASKS_SUBJOB_INDEX", "-1", "at least 0"),
    ("GRID_TASKS_RANK", "<unset>", "not set"),
    ("GRID_TASKS_RANK", "3", "outside the subjob of 3"),
    ("GRID_TASKS_SIZE", "0", "at least 1"),
    ("GRID_TASKS_BARRIER_TIMEOUT", "soon", "not a number"),
    ("GRID_TASKS_RECEIVE_TIMEOUT", "-1", "positive"),
])
def test_bad_variables_are_named(variable: str, value: str, why: str) -> None:
    with pytest.raises(RuntimeEnvironmentError, match=why) as info:
        RuntimeEnv.from_environ(environ(**{variable: value}))
    expected_key = "GRID_TASKS_RANK" if why.startswith("outside") else variable
    assert info.value.key == expected_key
    assert info.value.source == "environment"


def test_module_functions_outside_a_job(monkeypatch: pytest.MonkeyPatch) -> None:
    import grid_tasks.runtime as runtime

    for name in ("GRID_TASKS_RUNTIME_URL", "GRID_TASKS_COALLOC_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(runtime, "_current", None)
    with pytest.raises(RuntimeEnvironmentError, match="not started as part of a coallocated"):
        intra_subjob_rank()


def test_a_slurm_task_reads_its_rank_and_size_from_srun() -> None:
    # a batch script cannot set a variable per task: srun's SLURM_PROCID/SLURM_NTASKS stand in
    env = environ(GRID_TASKS_RANK="<unset>", GRID_TASKS_SIZE="<unset>",
                  SLURM_PROCID="2", SLURM_NTASKS="4")
    got = RuntimeEnv.from_environ(env)
    assert (got.rank, got.size) == (2, 4)
    # the job manager's own win (a native job started inside a Slurm allocation)
    both = RuntimeEnv.from_environ({**env, "GRID_TASKS_RANK": "0", "GRID_TASKS_SIZE": "1"})
    assert (both.rank, both.size) == (0, 1)


def test_a_bad_slurm_variable_is_named() -> None:
    env = environ(GRID_TASKS_RANK="<unset>", SLURM_PROCID="x")
    with pytest.raises(RuntimeEnvironmentError, match="SLURM_PROCID='x' is not an integer") \
            as info:
        RuntimeEnv.from_environ(env)
    assert info.value.key == "SLURM_PROCID"
