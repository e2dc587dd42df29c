"""authorize(settings, ...): the configured grid map, reloaded when the file changes."""

from __future__ import annotations

import os

import pytest

from grid_tasks.security.authorization import authorize, gridmap_for, local_identity
from grid_tasks.security.errors import GridMapError, Unauthorized
from grid_tasks.settings import Settings


def test_no_grid_map_means_authorization_off():
    assert authorize(Settings(), "/CN=anyone", "rmA") is None


def test_grid_map_from_settings_is_reloaded_after_an_edit(tmp_path):
    path = tmp_path / "grid-mapfile"
    path.write_text('"/CN=Alice" alice\n')
    settings = Settings.from_env({"GRID_TASKS_GRIDMAP": str(path),
                                  "GRID_TASKS_STATE_DIR": str(tmp_path)})
    assert authorize(settings, "/CN=Alice", "rmA").name == "alice"
    assert gridmap_for(settings) is gridmap_for(settings)  # cached while unchanged
    with pytest.raises(Unauthorized):
        authorize(settings, "/CN=Bob", "rmA")
    path.write_text('"/CN=Alice" alice\n"/CN=Bob" bob\n')
    stamp = path.stat().st_mtime_ns + 1_000_000
    os.utime(path, ns=(stamp, stamp))  # a distinct mtime even on coarse clocks
    assert authorize(settings, "/CN=Bob", "rmA").name == "bob"
    path.write_text('"/CN=Bob" \n')
    with pytest.raises(GridMapError) as info:
        authorize(settings, "/CN=Bob", "rmA")
    assert info.value.line == 1


def test_missing_grid_map_is_a_typed_error(tmp_path):
    settings = Settings(gridmap_file=tmp_path / "nope")
    with pytest.raises(GridMapError, match="cannot read grid map"):
        authorize(settings, "/CN=Alice", "rmA")


def test_local_identity_is_login_at_host():
    user, _, host = local_identity().partition("@")
    assert user and host
