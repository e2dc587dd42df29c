"""``--help`` as printed: no raw reST markup, and only documents that are in the repository."""

from __future__ import annotations

import re

import click
from click.testing import CliRunner

from grid_tasks.cli import COMMANDS, main, plain_text
from tests.conftest import REPO_ROOT


def _paths(ctx: click.Context, command: click.Command, path: list[str]) -> list[list[str]]:
    """Every command path under ``command`` (groups and their subcommands)."""
    found = [path]
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                found += _paths(ctx, sub, path + [name])
    return found


def test_plain_text_strips_double_backticks_only() -> None:
    assert plain_text("use ``-p`` or ``grid-tasks\nshowq`` (`x`)") == \
        "use -p or grid-tasks\nshowq (`x`)"


def test_no_help_page_shows_raw_double_backticks() -> None:
    runner = CliRunner()
    ctx = click.Context(main)
    paths = _paths(ctx, main, [])
    assert len(paths) > len(COMMANDS)  # the groups' subcommands are in
    for path in paths:
        result = runner.invoke(main, [*path, "--help"], terminal_width=100)
        assert result.exit_code == 0, (path, result.output)
        assert "``" not in result.output, (path, result.output)


def test_selftest_help_cites_documents_of_the_repository() -> None:
    out = CliRunner().invoke(main, ["selftest", "--help"], terminal_width=200).output
    assert "DESIGN.md" not in out
    cited = re.findall(r"[\w/.-]+\.(?:md|py)\b", out)
    assert cited and all((REPO_ROOT / c).exists() for c in cited), cited
