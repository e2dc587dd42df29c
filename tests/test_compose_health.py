"""compose.yaml's healthchecks and the build context of its image (.dockerignore),
checked statically (no Docker engine here; tests/embedded/test_stack.py runs the
health checks themselves against a live grid)."""

from __future__ import annotations

import fnmatch

import pytest
import yaml

from grid_tasks.embedded.health import KINDS
from grid_tasks.settings import Settings
from tests.conftest import REPO_ROOT
from tests.test_compose import COMPOSE, _command, _interpolate, _services


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


HEALTH = ["CMD", "python", "-m", "grid_tasks.embedded.health"]


def _one_shots(services: dict) -> set[str]:
    """Services others wait for as completed (``keys``, ``migrate``): they end."""
    return {dep for s in services.values() for dep, cond in (s.get("depends_on") or {}).items()
            if isinstance(cond, dict) and cond.get("condition") == "service_completed_successfully"}


def _option(argv: list[str], name: str) -> str | None:
    """``--name VALUE`` or ``--name=VALUE`` of ``argv``."""
    for i, arg in enumerate(argv):
        if arg == name:
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _expected_health(service: dict) -> list[str]:
    """The check a grid_tasks service must run, from its command: what proves it works."""
    from grid_tasks.cli.worker import worker_argv

    argv, env = _command(service), service.get("environment") or {}
    rm, node = _option(argv, "--rm") or env.get("GRID_TASKS_RM"), \
        _option(argv, "--node") or env.get("GRID_TASKS_NODE")
    if "flower" in argv:
        return ["http", f"http://127.0.0.1:{_option(argv, '--port')}/healthcheck"]
    if argv[:3] == ["grid-tasks", "metrics", "serve"]:
        return ["http", f"http://127.0.0.1:{_option(argv, '--port')}/metrics"]
    if argv[:2] == ["grid-tasks", "beat"]:
        return ["beat", _option(argv, "--name")]
    if rm and node:  # a node's key may not ping: its heartbeat tells
        return ["node", rm, node]
    assert argv[:2] == ["grid-tasks", "worker"], argv
    celery = worker_argv(rm=rm, node=None, scheduler="--scheduler" in argv, gatekeepers=False,
                         beat=False, settings=Settings(), pool=None, concurrency=None,
                         loglevel="INFO")
    return ["worker", celery[celery.index("-n") + 1].split("@")[0]]


def test_every_long_running_service_has_a_healthcheck_that_proves_it_works(compose):
    services = _services(compose)
    one_shots = _one_shots(services)
    assert one_shots == {"keys", "migrate"}
    checked = set()
    for name, service in services.items():
        if name in one_shots:
            continue
        health = service.get("healthcheck") or {}
        assert health.get("test"), f"service {name} has no healthcheck"
        assert health.get("interval") and health.get("retries"), name
        if name in ("redis", "postgres"):
            continue
        test = [_interpolate(p) for p in health["test"]]
        assert test[:4] == HEALTH, f"service {name}: {test}"
        kind, *args = test[4:]
        assert len(args) == len(KINDS[kind]), f"service {name}: {test}"
        assert test[4:] == _expected_health(service), name
        checked.add(kind)
    assert checked == set(KINDS)


def _ignored(patterns: list[str], path: str) -> bool:
    """Whether Docker leaves ``path`` (or a folder above it) out of the build context
    (its ``.dockerignore`` rules: later ones win, ``!`` re-includes)."""
    parts = path.split("/")
    out = False
    for pattern in patterns:
        keep = pattern.startswith("!")
        pat = pattern.lstrip("!").strip("/")
        for depth in range(1, len(parts) + 1):
            head = "/".join(parts[:depth])
            if fnmatch.fnmatchcase(head, pat) or (pat.startswith("**/") and (
                    fnmatch.fnmatchcase(head, pat[3:])
                    or fnmatch.fnmatchcase(head, "*/" + pat[3:]))):
                out = not keep
    return out


def test_the_build_context_holds_what_the_image_copies_and_no_local_state():
    lines = (REPO_ROOT / ".dockerignore").read_text().splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    copied = [src for line in (REPO_ROOT / "workers" / "Dockerfile").read_text().splitlines()
              if line.startswith("COPY ") for src in line.split()[1:-1]]
    assert copied == ["pyproject.toml", "setup.py", "README.md", "grid_tasks", "config"]
    for path in copied + ["grid_tasks/embedded/health.py", "config/demo-grid.toml"]:
        assert not _ignored(patterns, path), path
    for path in (".venv/bin/python", ".state/grid_tasks.db", ".git/config",
                 "grid_tasks/__pycache__/x.pyc", "sub/.state/keys/user/user.key",
                 ".state/flower.password", "tests/conftest.py", "grid.db"):
        assert _ignored(patterns, path), path
