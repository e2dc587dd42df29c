"""compose.yaml: well formed, the services the issue names, and every command exists;
it and the compute-host files of workers/ run every service signed, each with its own
role's key (the keys made by running the `keys` service's own command here).

No Docker engine runs here, so each service's command is parsed by the very
click command it names (``grid-tasks`` subcommands, ``celery worker``/``flower``).
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner

from grid_tasks.cli import main
from grid_tasks.settings import Settings
from grid_tasks.topology import load_topology
from tests.conftest import DEMO_TOPOLOGY, REPO_ROOT

COMPOSE = REPO_ROOT / "compose.yaml"
_VAR = re.compile(r"\$\{([A-Z_]+)(?::?[-?][^}]*)?\}")


def _interpolate(value: str) -> str:
    """Compose-style ${VAR}, ${VAR:-x}, ${VAR:?msg} -> a placeholder value."""
    return _VAR.sub(lambda m: f"{m.group(1).lower()}-value", value).replace("$$", "$")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def _services(compose: dict) -> dict[str, dict]:
    return compose["services"]


def _command(service: dict) -> list[str]:
    return [_interpolate(part) for part in service.get("command", [])]


def _parse(cmd: click.Command, name: str, args: list[str], parent=None, obj=None) -> None:
    """Parse ``args`` as click would, descending into groups; invokes nothing."""
    ctx = cmd.make_context(name, list(args), parent=parent, obj=obj)
    if isinstance(cmd, click.Group):
        rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
        assert rest, f"{name}: no subcommand"
        sub = cmd.get_command(ctx, rest[0])
        assert sub is not None, f"{name} has no subcommand {rest[0]!r}"
        _parse(sub, rest[0], rest[1:], parent=ctx, obj=obj)


def _check_grid_tasks(args: list[str]) -> None:
    _parse(main, "grid-tasks", args, obj={"debug": False})


def _check_celery(args: list[str]) -> None:
    from celery.bin.base import CLIContext
    from celery.bin.celery import celery

    assert Path(sys.executable).with_name("celery").exists() or shutil.which("celery")
    assert args[0] == "-A"
    app_module = args[1]
    __import__(app_module)
    sub, rest = args[2], args[3:]
    ctx = celery.make_context("celery", list(args))
    command = celery.get_command(ctx, sub)
    assert command is not None, f"celery has no {sub!r} command"
    if sub == "flower":  # flower passes its options to tornado: check they exist there
        from flower.options import options

        for opt in rest:
            key = opt.lstrip("-").split("=", 1)[0].replace("-", "_")
            assert key in options, f"flower has no option {opt}"
        return
    from grid_tasks.celery_app import create_app

    # only parses the command: an app built in code, which signs nothing (no keys here)
    obj = CLIContext(app=create_app(Settings()), no_color=True, workdir=None, quiet=True)
    command.make_context(sub, list(rest), parent=ctx, obj=obj)


def test_every_command_exists(compose):
    checked = 0
    for name, service in _services(compose).items():
        argv = _command(service)
        if not argv or "image" in service and "build" not in service:
            continue  # redis/postgres run their images' own commands
        if argv[0] == "grid-tasks":
            _check_grid_tasks(argv[1:])
        elif argv[0] == "celery":
            _check_celery(argv[1:])
        else:
            pytest.fail(f"service {name}: unexpected program {argv[0]!r}")
        checked += 1
    assert checked >= 8


def test_services_the_issue_names(compose):
    services = _services(compose)
    redis_cmd = " ".join(_command(services["redis"]))
    assert "requirepass" in redis_cmd and "$REDIS_PASSWORD" in redis_cmd
    assert "postgres" in services["postgres"]["image"]
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"]
    commands = {name: _command(s) for name, s in services.items()}
    scheduler = [c for c in commands.values() if "--scheduler" in c]
    assert len(scheduler) == 1
    # The beat is highly available: two or more `grid-tasks beat` (one leads), and no
    # embedded single beat next to them (it would send every periodic task twice).
    beats = [c for c in commands.values() if c[:2] == ["grid-tasks", "beat"]]
    assert len(beats) >= 2 and "--beat" not in scheduler[0]
    names = [c[c.index("--name") + 1] for c in beats if "--name" in c]
    assert len(set(names)) == len(names), "two beats share an identity"
    topo = load_topology(DEMO_TOPOLOGY)
    gatekeepers = {c[c.index("--rm") + 1] for c in commands.values()
                   if "--rm" in c and "--node" not in c}
    assert gatekeepers == set(topo.rms)
    node_daemons = {(c[c.index("--rm") + 1], c[c.index("--node") + 1])
                    for c in commands.values() if "--node" in c}
    for name, s in services.items():
        env = s.get("environment") or {}
        if isinstance(env, dict) and "GRID_TASKS_NODE" in env:
            node_daemons.add((env["GRID_TASKS_RM"], env["GRID_TASKS_NODE"]))
    assert node_daemons == {(n.rm, n.name) for n in topo.iter_nodes()}
    flower = [name for name, c in commands.items() if "flower" in c]
    assert len(flower) == 1
    assert _interpolate(services[flower[0]]["environment"]["FLOWER_BASIC_AUTH"]) == \
        "flower_user-value:flower_password-value"


def test_no_password_on_any_command_line(compose):
    """``/proc/<pid>/cmdline`` is world-readable: passwords go in environments only
    (Flower reads ``FLOWER_BASIC_AUTH``, Redis its configuration from stdin)."""
    from flower.options import options

    assert "basic_auth" in options  # what FLOWER_BASIC_AUTH sets (flower's apply_env_options)
    for name, service in _services(compose).items():
        health = (service.get("healthcheck") or {}).get("test", [])
        for part in [*_command(service), *(_interpolate(p) for p in health)]:
            assert "password-value" not in part, f"service {name}: a password in {part!r}"


def test_environment_is_valid_settings(compose):
    for name, service in _services(compose).items():
        env = service.get("environment")
        if not isinstance(env, dict) or not any(k.startswith("GRID_TASKS_") for k in env):
            continue
        values = {k: _interpolate(str(v)) for k, v in env.items()}
        settings = Settings.from_env(values)  # a ConfigError here names the variable
        if "GRID_TASKS_DATABASE_URL" in values:  # all but node daemons (test below)
            assert settings.database_url.startswith("postgresql+psycopg://")
        assert ":redis_password-value@redis:6379" in settings.redis_url
        assert settings.broker_url != settings.result_backend != settings.redis_url


def test_depends_on_names_real_services(compose):
    services = _services(compose)
    for name, service in services.items():
        for dep in service.get("depends_on", {}) or {}:
            assert dep in services, f"{name} depends on unknown service {dep}"


def test_beat_lease_and_metrics_endpoint(compose):
    from grid_tasks.ha.config import BeatOptions

    services = _services(compose)
    for name, service in services.items():
        env = service.get("environment")
        if isinstance(env, dict) and "GRID_TASKS_BEAT_LEASE" in env:
            values = {k: _interpolate(str(v)) for k, v in env.items()}
            assert BeatOptions.from_env(values).failover_bound < 30, name
    metrics = [s for s in services.values()
               if _command(s)[:3] == ["grid-tasks", "metrics", "serve"]]
    assert len(metrics) == 1
    argv = _command(metrics[0])
    port = argv[argv.index("--port") + 1]
    assert argv[argv.index("--bind") + 1] == "0.0.0.0"  # reachable from outside the container
    assert any(p.endswith(f":{port}:{port}") for p in metrics[0]["ports"])


# -- signing: every service signs with its own role's key --------------------------------

WORKERS = REPO_ROOT / "workers"
KEYLESS = (["grid-tasks", "db", "upgrade"], ["grid-tasks", "metrics", "serve"])  # send no task


def _mounts(service: dict) -> dict[str, tuple[str, bool]]:
    """Container path -> (volume, read-only) of a service's ``volume:path[:ro]`` mounts."""
    out = {}
    for spec in service.get("volumes", []):
        source, target, *mode = spec.split(":")
        out[target] = (source, mode == ["ro"])
    return out


def _expected_role(service: dict) -> str | None:
    """The role whose key a service must hold, from what it runs; None: no key at all."""
    argv, env = _command(service), service.get("environment") or {}
    if any(argv[:len(k)] == k for k in KEYLESS):
        return None
    if "--node" in argv or "GRID_TASKS_NODE" in env:
        return "node"
    return "operator" if "flower" in argv else "scheduler"


def _grid_services(compose: dict) -> dict[str, dict]:
    """The services running grid_tasks itself (built from the image), but `keys`."""
    return {name: s for name, s in _services(compose).items()
            if "build" in s and name != "keys"}


@pytest.fixture(scope="module")
def made_keys(compose, tmp_path_factory) -> tuple[Path, str, dict[str, Path]]:
    """What the `keys` service makes, made by its own command into a temporary folder:
    (that folder, the folder it names in the container, volume -> folder of its files)."""
    keys = _services(compose)["keys"]
    argv = _command(keys)
    assert argv[:3] == ["grid-tasks", "keys", "init-grid"], argv
    target = argv[3]
    host = tmp_path_factory.mktemp("keys") / "keys"
    result = CliRunner().invoke(main, ["keys", "init-grid", str(host), *argv[4:]])
    assert result.exit_code == 0, result.output
    volumes = {}
    for path, (volume, read_only) in _mounts(keys).items():
        assert not read_only and Path(path).parent == Path(target), path
        volumes[volume] = host / Path(path).relative_to(target)
    return host, target, volumes


def _on_host(service: dict, path: str, volumes: dict[str, Path]) -> Path:
    """Where ``path`` of ``service``'s container is among the keys made (AssertionError if
    no read-only key volume of the service holds it)."""
    for target, (volume, read_only) in _mounts(service).items():
        if Path(path).is_relative_to(target) and volume in volumes:
            assert read_only, f"{volume} mounted writable at {target}"
            return volumes[volume] / Path(path).relative_to(target)
    raise AssertionError(f"{path}: on no key volume of the service")


def test_every_service_signs_with_its_roles_key_only(compose, made_keys):
    from celery.security.certificate import Certificate

    from grid_tasks.security.keys import check_key_matches
    from grid_tasks.security.trust import TrustStore

    _, _, volumes = made_keys
    seen = set()
    for name, service in _grid_services(compose).items():
        env = {k: _interpolate(str(v)) for k, v in (service.get("environment") or {}).items()}
        assert env.get("GRID_TASKS_SIGNING", "1") == "1", f"{name} does not sign"
        role = _expected_role(service)
        key_volumes = {v for v, _ in _mounts(service).values() if v in volumes}
        if role is None:
            assert not key_volumes and "GRID_TASKS_SIGNING_KEY" not in env, name
            continue
        assert key_volumes == {f"keys-{role}", "keys-certs"}, (name, key_volumes)
        signing = Settings.from_env(env).signing
        assert signing.enabled
        key, cert, store = (_on_host(service, str(p), volumes)
                            for p in (signing.key, signing.cert, signing.cert_store))
        check_key_matches(key, cert)  # the key file is the certificate's private half
        signer = TrustStore(store).signer(Certificate(cert.read_text()).get_id())
        assert signer is not None and {r.value for r in signer.roles} == {role}, name
        seen.add(role)
    assert seen == {"scheduler", "node", "operator"}


def test_no_node_service_can_reach_the_scheduler_key(compose, made_keys):
    host, _, volumes = made_keys
    scheduler_key = (host / "scheduler" / "scheduler.key").read_bytes()
    nodes = [s for s in _grid_services(compose).values() if _expected_role(s) == "node"]
    assert len(nodes) == 4
    for service in nodes:
        for volume, _ in _mounts(service).values():
            files = volumes[volume].rglob("*") if volume in volumes else []
            assert all(f.is_dir() or f.read_bytes() != scheduler_key for f in files), volume
        assert not any("scheduler" in str(v) for v in service["environment"].values())


def test_keys_are_made_before_anything_that_signs(compose):
    services = _services(compose)
    keys = services["keys"]
    assert "restart" not in keys  # one-shot
    declared = set(compose["volumes"])
    assert {v for v, _ in _mounts(keys).values()} == {v for v in declared
                                                     if v.startswith("keys-")}
    for name, service in _grid_services(compose).items():
        if _expected_role(service) is not None:
            dep = (service.get("depends_on") or {}).get("keys") or {}
            assert dep.get("condition") == "service_completed_successfully", name


def _env_file(path: Path) -> dict[str, str]:
    lines = [ln.strip() for ln in path.read_text().splitlines()]
    return dict(ln.split("=", 1) for ln in lines if ln and not ln.startswith("#"))


def test_no_shipped_file_turns_signing_off():
    off = re.compile(r"GRID_TASKS_SIGNING\s*[=:]\s*[\"']?0")
    for path in [COMPOSE, *sorted(WORKERS.iterdir())]:
        assert not off.search(path.read_text()), f"{path} switches signing off"
    dockerfile = (WORKERS / "Dockerfile").read_text()
    assert "GRID_TASKS_SIGNING=1" in dockerfile and "chown -R grid:grid /keys" in dockerfile


def test_node_env_example_holds_the_node_key_only():
    env = _env_file(WORKERS / "node.env.example")
    signing = Settings.from_env(env).signing
    assert signing.enabled
    assert signing.key.parent.name == "node" and signing.key.name == "node.key"
    assert signing.cert_store.name == "certs"
    assert not any("scheduler" in v or "user" in v for k, v in env.items() if "SIGNING" in k)
    unit = (WORKERS / "grid-tasks-node@.service").read_text()
    assert f"AssertPathExists={signing.key}" in unit
    assert f"AssertPathExists={signing.cert_store}/scheduler" in unit
    assert "EnvironmentFile=/etc/grid_tasks/node.env" in unit


def test_no_node_holds_database_credentials(compose):
    """Node daemons report to their gatekeeper: no database URL, no wait on postgres;
    everything else that runs grid_tasks still has the database."""
    nodes = {name: s for name, s in _grid_services(compose).items()
             if _expected_role(s) == "node"}
    assert len(nodes) == 4
    for name, service in nodes.items():
        env = service.get("environment") or {}
        assert "GRID_TASKS_DATABASE_URL" not in env, name
        assert not any("postgres" in str(v) for v in env.values()), name
        assert "postgres" not in (service.get("depends_on") or {}), name
        assert "migrate" not in (service.get("depends_on") or {}), name
    others = [s for s in _grid_services(compose).values() if _expected_role(s) != "node"]
    assert others and all("GRID_TASKS_DATABASE_URL" in s["environment"] for s in others)
    assert "GRID_TASKS_DATABASE_URL" not in _env_file(WORKERS / "node.env.example")
    assert "DATABASE" not in (WORKERS / "grid-tasks-node@.service").read_text()
