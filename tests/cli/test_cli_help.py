"""``grid-tasks --help``: listed from the ``COMMANDS`` table, importing no command."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

import click
import pytest

from grid_tasks.cli import COMMANDS, LazyGroup, main
from tests.conftest import REPO_ROOT


def _python(code: str) -> str:
    """Run CODE in a fresh interpreter on this checkout; its stdout."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env=env, cwd=REPO_ROOT).stdout


def _commands() -> dict[str, click.Command]:
    """Every command of the table, imported."""
    ctx = click.Context(main)
    commands = {name: main.get_command(ctx, name) for name in COMMANDS}
    missing = [name for name, cmd in commands.items() if cmd is None]
    assert not missing, f"COMMANDS lists modules that do not exist: {missing}"
    return commands


def _listing(fmt, width: int) -> str:
    """The ``Commands:`` section that FMT (a ``format_commands``) writes at WIDTH."""
    ctx = click.Context(main, info_name="grid-tasks")
    formatter = click.HelpFormatter(width=width)
    fmt(main, ctx, formatter)
    return formatter.getvalue()


def test_the_table_holds_each_commands_own_short_help() -> None:
    for name, cmd in _commands().items():
        assert COMMANDS[name][1] == cmd.get_short_help_str(sys.maxsize), name


@pytest.mark.parametrize("width", [30, 50, 80, 120])
def test_the_listing_is_the_one_click_writes(width: int) -> None:
    # click.Group.format_commands imports every command and asks each for its
    # get_short_help_str(limit); the table's listing must read the same.
    _commands()
    ours = _listing(LazyGroup.format_commands, width)
    assert ours == _listing(click.Group.format_commands, width)
    assert ours.startswith("Commands:\n")


def test_help_lists_every_command() -> None:
    out = _python("from grid_tasks.cli import main; main(['--help'], prog_name='grid-tasks')")
    listing = out.split("Commands:\n", 1)[1]
    listed = [line.split()[0] for line in listing.splitlines() if line.strip()]
    assert listed == sorted(COMMANDS)


def test_help_imports_no_command_module_nor_celery_or_sqlalchemy() -> None:
    code = (
        "import json, sys\n"
        "from grid_tasks.cli import main\n"
        "main(['--help'], prog_name='grid-tasks', standalone_mode=False)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    loaded = json.loads(_python(code).splitlines()[-1])
    command_modules = {target.split(":")[0] for target, _ in COMMANDS.values()}
    assert not command_modules & set(loaded)
    assert [m for m in loaded if m.startswith("grid_tasks.cli.")] == []
    for heavy in ("celery", "kombu", "redis", "sqlalchemy"):
        assert heavy not in loaded, heavy


def test_a_command_whose_module_is_not_built_is_not_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(COMMANDS, "later", ("grid_tasks.cli.not_built_yet:later", "Not built yet."))
    ctx = click.Context(main)
    assert main.get_command(ctx, "later") is None
    formatter = click.HelpFormatter(width=80)
    main.format_commands(ctx, formatter)
    assert "later" not in formatter.getvalue()


def test_the_interpreter_exits_without_walking_every_object_again() -> None:
    """By exit every object is in the collector's permanent generation (the shutdown's
    collections then walk nothing: a third of a second of a deep showq); an atexit
    handler registered before the CLI's runs after it and sees them frozen."""
    code = ("import atexit, gc, sys\n"
            "atexit.register(lambda: print(gc.get_freeze_count(), file=sys.stderr))\n"
            "from grid_tasks.cli import main\n"
            "try:\n    main(['--help'], prog_name='grid-tasks')\nexcept SystemExit:\n    pass\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO_ROOT, check=True, timeout=60)
    assert int(done.stderr.strip().splitlines()[-1]) > 1000


def test_a_command_module_is_imported_with_the_collector_paused(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Imports make no garbage worth a collection (they cost showstart ~0.1 s): the
    collector is off while a command's module loads, and as it was after."""
    (tmp_path / "gt_probe_command.py").write_text(
        "import gc\nimport click\nCOLLECTING = gc.isenabled()\n\n"
        "@click.command()\ndef probe():\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(COMMANDS, "probe", ("gt_probe_command:probe", "A probe."))
    monkeypatch.delitem(sys.modules, "gt_probe_command", raising=False)
    assert gc.isenabled()
    assert main.get_command(click.Context(main), "probe") is not None
    assert sys.modules["gt_probe_command"].COLLECTING is False
    assert gc.isenabled()
    gc.disable()
    try:
        monkeypatch.delitem(sys.modules, "gt_probe_command")
        main.get_command(click.Context(main), "probe")
        assert not gc.isenabled()  # left as the caller had it
    finally:
        gc.enable()
