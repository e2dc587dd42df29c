"""The demo grid's optional Slurm cluster: a private one, as RM ``slurm1``, when it can run.

Most clusters a grid user reaches run Slurm, so ``grid-tasks demo`` shows one beside
the native RMs when this machine can host it: Debian's slurm-wlm and munge installed
and root (slurmd must be root to start jobs as their owners).  The stack then runs a
:class:`~grid_tasks.embedded.slurm_cluster.SlurmSite` of two slurmd in its state
directory and a topology of its own: the chosen one plus the Slurm RM.  Otherwise the
demo runs without it and says why in one line.  ``grid-tasks up --slurm`` asks for the
same cluster and refuses to start without it (:func:`start_local_slurm`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from grid_tasks.embedded.slurm_cluster import SlurmSite, missing_binaries
from grid_tasks.errors import ConfigError

#: The Slurm RM's name in the demo topology, and its cluster's.
SLURM_RM = "slurm1"
CLUSTER = "demo"
NODES = 2
#: What the demo and ``up --slurm`` say once the cluster runs.
RUNNING_NOTE = f"Slurm cluster {CLUSTER!r} ({NODES} slurmd) serves RM {SLURM_RM}"
_POLICY = re.compile(r'^(\s*policy_file\s*=\s*)"([^"]*)"', re.MULTILINE)


@dataclass
class DemoSlurm:
    """The running cluster and the topology that names it."""

    site: SlurmSite
    topology_file: Path
    rm: str = SLURM_RM

    def stop(self) -> None:
        self.site.stop()


def unavailable() -> str | None:
    """Why no Slurm cluster can run here (None: it can)."""
    missing = missing_binaries()
    if missing:
        return f"Slurm is not installed (no {', '.join(missing)})"
    if os.geteuid() != 0:
        return "slurmd must run as root to start jobs"
    return None


class SlurmNotRunnable(ConfigError):
    """A Slurm cluster was asked for and this machine cannot run one (the message
    says why: binaries missing, not root, or the daemons' own error)."""

    def __init__(self, why: str) -> None:
        super().__init__(f"no local Slurm cluster: {why}", source="grid-tasks up --slurm")
        self.why = why


def start_demo_slurm(state_dir: Path, topology_file: Path) -> tuple[DemoSlurm | None, str]:
    """Start the cluster: (it, a line saying so), or (None, a line saying why not).
    A cluster that fails to start is left out too (its error is the reason)."""
    try:
        running = start_local_slurm(state_dir, topology_file)
    except SlurmNotRunnable as exc:
        return None, f"no Slurm cluster in this demo: {exc.why}"
    return running, RUNNING_NOTE


def start_local_slurm(state_dir: Path, topology_file: Path) -> DemoSlurm:
    """Start the cluster in ``state_dir/slurm`` and write the topology naming its RM;
    :class:`SlurmNotRunnable` (nothing left running) when it cannot run here."""
    why = unavailable()
    if why is not None:
        raise SlurmNotRunnable(why)
    site = SlurmSite(state_dir / "slurm", {CLUSTER: NODES})
    try:
        site.start()
    except Exception as exc:  # noqa: BLE001 - any failure: the caller decides what it means
        site.stop()
        raise SlurmNotRunnable(f"it did not start ({exc})") from exc
    assert site.public is not None
    out = site.public / "out"  # job accounts pass through (0711), as through the site's
    out.mkdir(mode=0o711, exist_ok=True)
    derived = with_slurm_rm(topology_file, state_dir / "grid-with-slurm.toml",
                            site[CLUSTER].conf, out)
    return DemoSlurm(site, derived)


def with_slurm_rm(topology_file: Path, target: Path, slurm_conf: Path, output_dir: Path) -> Path:
    """Write ``topology_file`` plus the Slurm RM to ``target``.  Relative policy files
    are made absolute: the copy lives elsewhere, and they resolve against its folder."""
    folder = topology_file.resolve().parent

    def absolute(match: re.Match[str]) -> str:
        return f'{match.group(1)}"{(folder / match.group(2)).resolve()}"'

    text = _POLICY.sub(absolute, topology_file.read_text())
    text += (f'\n[rm.{SLURM_RM}]\nkind = "slurm"\nslurm_conf = "{slurm_conf}"\n'
             f'partition = "all"\noutput_dir = "{output_dir}"\n')
    target.write_text(text)
    return target
