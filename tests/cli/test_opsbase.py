"""The operator commands' shared shell: while a command works, the objects alive when it
began are out of the collector's passes (frozen), and back in afterwards, also when it
fails (nothing is kept from collection past the command, e.g. in this test process)."""

from __future__ import annotations

import gc

import pytest

from grid_tasks.cli.opsbase import ops_shell


@pytest.fixture
def grid(grid_env, monkeypatch):
    for key, value in grid_env.items():
        monkeypatch.setenv(key, value)


def test_what_lived_before_the_command_is_frozen_while_it_works(grid):
    gc.unfreeze()
    alive = len(gc.get_objects())
    with ops_shell():
        assert gc.get_freeze_count() >= alive // 2
    assert gc.get_freeze_count() == 0
    with pytest.raises(RuntimeError), ops_shell():
        raise RuntimeError("the command failed")
    assert gc.get_freeze_count() == 0
