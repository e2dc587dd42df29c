"""The demo grid's optional Slurm cluster: a private one, as RM ``slurm1``, when it can run.

Most clusters a grid user reaches run Slurm, so ``grid-tasks demo`` shows one beside
the native RMs when this machine can host it: Debian's slurm-wlm and munge installed
and root (slurmd must be root to start jobs as their owners).  The stack then runs a
:class:`~grid_tasks.embedded.slurm_cluster.SlurmSite` of two slurmd in its state
directory and a topology of its own: the chosen one plus the Slurm RM.  Otherwise the
demo runs without it and says why in one line.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from grid_tasks.embedded.slurm_cluster import SlurmSite, missing_binaries

#: The Slurm RM's name in the demo topology, and its cluster's.
SLURM_RM = "slurm1"
CLUSTER = "demo"
NODES = 2
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


def start_demo_slurm(state_dir: Path, topology_file: Path) -> tuple[DemoSlurm | None, str]:
    """Start the cluster: (it, a line saying so), or (None, a line saying why not).
    A cluster that fails to start is left out too (its error is the reason)."""
    why = unavailable()
    if why is not None:
        return None, f"no Slurm cluster in this demo: {why}"
    site = SlurmSite(state_dir / "slurm", {CLUSTER: NODES})
    try:
        site.start()
    except Exception as exc:  # noqa: BLE001 - optional: the demo runs without it
        site.stop()
        return None, f"no Slurm cluster in this demo: it did not start ({exc})"
    assert site.public is not None
    out = site.public / "out"  # job accounts pass through (0711), as through the site's
    out.mkdir(mode=0o711, exist_ok=True)
    derived = with_slurm_rm(topology_file, state_dir / "grid-with-slurm.toml",
                            site[CLUSTER].conf, out)
    return DemoSlurm(site, derived), (f"Slurm cluster {CLUSTER!r} ({NODES} slurmd) serves "
                                      f"RM {SLURM_RM}")


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
