"""Which resource managers of a grid are Slurm clusters, and where their jobs' streams go.

The topology file is where a Slurm RM is declared (its ``slurm_conf``, partition,
account); the gatekeeper, its follower and the scheduler (which leaves a Slurm RM's
jobs to Slurm) all ask here.  The file is read again only when it changed, so asking
on every submission or iteration costs one ``stat``.

A job's streams, when its RSL names none, go to a folder the RM keeps per job
(``<output_dir>/<job id>``), owned by the mapped account (Slurm opens them as that
account on the compute node) and read back by the follower into the job's output
stream.  The base folder is the gatekeeper's own (mode 0711: others may pass through
to their job's folder but not list the others').
"""

from __future__ import annotations

import os
import pwd
import stat
import tempfile
import threading
from pathlib import Path
from typing import Any

from grid_tasks.errors import ConfigError, GridTasksError
from grid_tasks.slurm.client import SlurmClient
from grid_tasks.topology import GridTopology, RMKind, SlurmSpec, load_topology

_cache: dict[str, tuple[int, GridTopology]] = {}
_cache_lock = threading.Lock()


def topology_of(settings: Any) -> GridTopology:
    """The grid's topology, read again only when its file changed (mtime)."""
    path = str(settings.topology_file)
    try:
        stamp = os.stat(path).st_mtime_ns
    except OSError:
        stamp = -1  # load_topology names the problem
    with _cache_lock:
        found = _cache.get(path)
        if found is not None and found[0] == stamp:
            return found[1]
    topo = load_topology(path)
    with _cache_lock:
        _cache[path] = (stamp, topo)
    return topo


def slurm_spec(settings: Any, rm: str) -> SlurmSpec | None:
    """How to reach ``rm`` when it is a Slurm cluster; None for a native RM, an RM the
    topology does not know, or no readable topology (those are not Slurm's to run)."""
    try:
        spec = topology_of(settings).rms.get(rm)
    except GridTasksError:
        return None
    if spec is None or spec.kind is not RMKind.SLURM:
        return None
    return spec.slurm


def slurm_rms(settings: Any) -> dict[str, SlurmSpec]:
    """Every Slurm RM of the topology by name (none when it cannot be read)."""
    try:
        rms = topology_of(settings).rms
    except GridTasksError:
        return {}
    return {name: spec.slurm for name, spec in rms.items()
            if spec.kind is RMKind.SLURM and spec.slurm is not None}


def client_for(spec: SlurmSpec) -> SlurmClient:
    """The client commands of the cluster ``spec`` names."""
    return SlurmClient(str(spec.slurm_conf), spec.partition)


def output_base(spec: SlurmSpec, rm: str) -> Path:
    """The folder of ``rm``'s job folders: made (0711) if missing; one that another
    account owns is refused (someone could read or swap the jobs' streams)."""
    base = spec.output_dir or Path(tempfile.gettempdir()) / f"grid-tasks-slurm-{rm}"
    try:
        base.mkdir(mode=0o711, parents=True, exist_ok=True)
        info = base.lstat()
    except OSError as exc:
        raise ConfigError(f"output folder of Slurm RM {rm} unusable: {exc}",
                          source=str(base), key=f"rm.{rm}.output_dir") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise ConfigError(f"output folder of Slurm RM {rm} is not a folder of this "
                          f"gatekeeper's account (uid {os.geteuid()})", source=str(base),
                          key=f"rm.{rm}.output_dir")
    if info.st_mode & 0o777 != 0o711:
        base.chmod(0o711)
    return base


def job_folder(spec: SlurmSpec, rm: str, job_id: int, account: str | None) -> Path:
    """A fresh folder for job ``job_id``'s streams, owned by ``account`` (None: this
    process's own) with mode 0700."""
    folder = output_base(spec, rm) / str(int(job_id))
    folder.mkdir(mode=0o700, exist_ok=True)
    if account is not None:
        entry = pwd.getpwnam(account)
        os.chown(folder, entry.pw_uid, entry.pw_gid)
    return folder
