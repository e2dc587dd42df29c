"""The topology a gatekeeper checks registrations against: parsed once per file
version, not once per registration (at 1,000 nodes that was O(nodes²) at start)."""

from __future__ import annotations

from pathlib import Path

import pytest

from grid_tasks.errors import ConfigError
from grid_tasks.topology_cache import current_topology

ONE = '[rm.a]\n[rm.a.node."n[01-20]"]\nprocs = 2\n'
TWO = '[rm.a]\n[rm.a.node."n[01-30]"]\nprocs = 4\n'


def test_parsed_once_while_the_file_is_unchanged_and_again_when_it_changes(
        tmp_path: Path) -> None:
    path = tmp_path / "grid.toml"
    path.write_text(ONE)
    first = current_topology(path)
    assert current_topology(str(path)) is first  # from memory: not parsed again
    assert first.node("a", "n20").procs == 2
    path.write_text(TWO)  # another size (and time): read again
    second = current_topology(path)
    assert second is not first and second.node("a", "n30").procs == 4


def test_a_missing_or_broken_file_is_its_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        current_topology(tmp_path / "none.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("[rm.a\n")
    with pytest.raises(ConfigError):
        current_topology(broken)


def test_a_broken_version_is_parsed_once_and_its_error_kept(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import grid_tasks.topology_cache as cache
    parses = []
    real = cache.load_topology
    monkeypatch.setattr(cache, "load_topology", lambda p: parses.append(p) or real(p))
    broken = tmp_path / "broken.toml"
    broken.write_text("[rm.a\n")
    for _ in range(3):
        with pytest.raises(ConfigError):
            current_topology(broken)
    assert len(parses) == 1
    broken.write_text(ONE)  # fixed: read again
    assert current_topology(broken).node("a", "n01").procs == 2 and len(parses) == 2
