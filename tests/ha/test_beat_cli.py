"""``grid-tasks beat``: status output, option errors and the celery argv."""

from __future__ import annotations

import json

import redis
from click.testing import CliRunner

from grid_tasks.cli import main
from grid_tasks.cli.beat import beat_argv, load_includes
from grid_tasks.ha.config import LEASE_KEY, MEMBERS_KEY, SCHEDULER_CLASS


def _run(settings, *args):
    return CliRunner().invoke(main, list(args), env=settings.to_env())


def test_status_json_shows_leader_and_members(settings):
    client = redis.Redis.from_url(settings.redis_url)
    client.set(LEASE_KEY, "beat-1", px=4000)
    client.hset(MEMBERS_KEY, mapping={
        "beat-1": json.dumps({"role": "leader", "since": 1.0, "seen": 2.0}),
        "beat-0": json.dumps({"role": "leader", "since": 0.5, "seen": 1.0}),
        "beat-2": json.dumps({"role": "standby", "since": 1.0, "seen": 2.0})})
    result = _run(settings, "beat", "--status", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["leader"] == "beat-1" and 0 < data["lease_ttl_ms"] <= 4000
    roles = {m["identity"]: m["role"] for m in data["members"]}
    assert roles == {"beat-1": "leader", "beat-0": "silent", "beat-2": "standby"}
    table = _run(settings, "beat", "--status")
    assert table.exit_code == 0 and "leader: beat-1" in table.output
    client.close()


def test_status_without_redis_is_a_clean_error(settings):
    env = {**settings.to_env(), "GRID_TASKS_REDIS_URL": "redis://127.0.0.1:1/3"}
    result = CliRunner().invoke(main, ["beat", "--status"], env=env)
    assert result.exit_code == 1
    assert "error: cannot read the beat state from Redis" in result.output


def test_bad_lease_and_missing_include_are_reported(settings):
    result = _run(settings, "beat", "--lease", "2", "--poll", "5", "--no-check")
    assert result.exit_code == 1 and "shorter than the lease" in result.output
    result = _run(settings, "beat", "--include", "no_such_module_xyz", "--no-check")
    assert result.exit_code == 1 and "--include no_such_module_xyz" in result.output


def test_includes_gather_beat_schedule_and_argv_uses_the_ha_scheduler():
    entries = load_includes(("tests.ha.probe",))
    assert entries["ha-probe"]["task"] == "tests.ha.probe.tick"
    argv = beat_argv("WARNING", ("--pidfile=",))
    assert argv[:3] == ["beat", "-S", SCHEDULER_CLASS] and argv[-1] == "--pidfile="


def test_beat_commands_parse_as_grid_tasks_beat():
    from grid_tasks.ha.launch import beat_commands

    pairs = beat_commands(2, lease=3, poll=0.2, loglevel="WARNING")
    assert [n for n, _ in pairs] == ["beat-a", "beat-b"]
    for name, argv in pairs:
        args = argv[argv.index("beat"):]
        ctx = main.make_context("grid-tasks", list(args), obj={"debug": False})
        cmd = main.get_command(ctx, "beat")
        sub = cmd.make_context("beat", args[1:], parent=ctx)
        assert sub.params["name"] == name and sub.params["lease"] == 3.0
        assert sub.params["poll"] == 0.2 and sub.params["check"] is False
