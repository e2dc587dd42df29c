"""Where Flower's password comes from: the operator's file, else a private one made once."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from grid_tasks.embedded.flower import PASSWORD_FILE, flower_password
from grid_tasks.errors import ConfigError


def test_a_generated_password_is_kept_in_a_0600_file_and_reused(tmp_path: Path) -> None:
    password, path = flower_password(tmp_path, environ={})
    assert path == tmp_path / PASSWORD_FILE and len(password) >= 16
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert flower_password(tmp_path, environ={}) == (password, path)  # a restart keeps it


def test_the_operators_file_wins(tmp_path: Path) -> None:
    chosen = tmp_path / "secret"
    chosen.write_text("correct horse\n")
    assert flower_password(tmp_path, environ={"FLOWER_PASSWORD_FILE": str(chosen)}) == \
        ("correct horse", chosen)
    assert not (tmp_path / PASSWORD_FILE).exists()


@pytest.mark.parametrize("content", ["", "a,b"])
def test_an_unusable_password_file_is_a_typed_error(tmp_path: Path, content: str) -> None:
    chosen = tmp_path / "secret"
    chosen.write_text(content)
    with pytest.raises(ConfigError, match="empty or holds a comma"):
        flower_password(tmp_path, environ={"FLOWER_PASSWORD_FILE": str(chosen)})
    with pytest.raises(ConfigError, match="cannot read"):
        flower_password(tmp_path, environ={"FLOWER_PASSWORD_FILE": str(tmp_path / "none")})
