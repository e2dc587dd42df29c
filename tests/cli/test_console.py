"""Tables are never cut when the output is piped (rich's 80 columns off a terminal)."""

from __future__ import annotations

import io

from grid_tasks.cli.console import PIPE_WIDTH, wide_console
from grid_tasks.states import JobState
from tests.cli import test_ops_cli
from tests.cli.test_ops_cli import run

ops = test_ops_cli.ops  # the fixture, found by pytest under this name


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_width_when_piped_on_a_terminal_and_with_columns(monkeypatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr("sys.stdout", io.StringIO())
    assert wide_console().width == PIPE_WIDTH
    monkeypatch.setattr("sys.stdout", _Tty())
    monkeypatch.setenv("COLUMNS", "90")
    assert wide_console().width == 90 and wide_console(minimum=120).width == 120
    monkeypatch.setattr("sys.stdout", io.StringIO())
    assert wide_console().width == 90  # COLUMNS is the user's word, piped or not


def test_piped_showq_keeps_every_word_whole(ops, monkeypatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    env, insert, _, _ = ops
    env = {k: v for k, v in env.items() if k != "COLUMNS"}
    user = "a_very_long_user_name_that_rich_would_cut_" + "strictly_" * 9
    insert(rm="rmA", user=user, state=JobState.PENDING, walltime=600, tasks=2, procs=2)
    out = run(env, "showq").stdout
    assert user in out and "…" not in out
