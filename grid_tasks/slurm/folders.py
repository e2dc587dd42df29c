"""Where a Slurm RM's jobs write their streams: a folder the RM keeps per job.

A job's streams, when its RSL names none, go to ``<output_dir>/<job id>``, owned by
the mapped account (Slurm opens them as that account on the compute node) and read
back by the follower (:mod:`grid_tasks.scheduling.slurm_follow`) into the job's output
stream.  The base folder is the gatekeeper's own (mode 0711: others may pass through
to their job's folder but not list the others'); without ``output_dir`` in the
topology it is ``grid-tasks-slurm-<rm>`` in the system's temporary folder.
"""

from __future__ import annotations

import os
import pwd
import stat
import tempfile
from pathlib import Path

from grid_tasks.errors import ConfigError


def output_base(output_dir: Path | None, rm: str) -> Path:
    """The folder of ``rm``'s job folders: made (0711) if missing; one that another
    account owns is refused (someone could read or swap the jobs' streams)."""
    base = output_dir or Path(tempfile.gettempdir()) / f"grid-tasks-slurm-{rm}"
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


def job_folder(output_dir: Path | None, rm: str, job_id: int, account: str | None) -> Path:
    """A folder for job ``job_id``'s streams, owned by ``account`` (None: this process's
    own) with mode 0700."""
    folder = output_base(output_dir, rm) / str(int(job_id))
    folder.mkdir(mode=0o700, exist_ok=True)
    if account is not None:
        entry = pwd.getpwnam(account)
        os.chown(folder, entry.pw_uid, entry.pw_gid)
    return folder
