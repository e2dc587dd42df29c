"""What the tests that start private Slurm clusters share: when they can run and a site
fixture of the clusters a module needs (tests/conftest.py's ``open_dir`` is a folder a
job's account may write)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from grid_tasks.embedded.slurm_cluster import SlurmSite, missing_binaries


def skip_reason(need_useradd: bool = False) -> str | None:
    """Why private Slurm clusters cannot run here (None: they can)."""
    missing = missing_binaries()
    if missing:
        return (f"Slurm/munge not installed (no {', '.join(missing)}; Debian: apt-get "
                "install slurm-wlm munge)")
    if os.geteuid() != 0:
        return "slurmd must run as root to start jobs"
    if need_useradd and shutil.which("useradd") is None:
        return "the test account needs useradd"
    return None


#: ``pytestmark`` of a module whose tests start Slurm clusters.
NEEDS_SLURM = [pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or ""),
               pytest.mark.timeout(120)]


def site_fixture(clusters: dict[str, int]) -> Callable[..., Any]:
    """A module-scoped fixture running a :class:`SlurmSite` of ``clusters``."""

    @pytest.fixture(scope="module")
    def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmSite]:
        with SlurmSite(tmp_path_factory.mktemp("slurm") / "site", clusters) as running:
            yield running

    return site

