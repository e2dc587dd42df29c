"""A job running under its daemon's uid cannot read the daemon's environment
(``/proc/$PPID/environ``): a daemon process of a real unprivileged account."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


#: The system interpreter: an unprivileged account may run it (this venv's lives in
#: root's home here), and the module under test needs only the standard library.
SYSTEM_PYTHON = "/usr/bin/python3"
needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None
                                or shutil.which("setpriv") is None
                                or not os.access(SYSTEM_PYTHON, os.X_OK),
                                reason="needs root, useradd, setpriv and /usr/bin/python3")
WORKTREE = str(Path(__file__).resolve().parents[2])

#: A stand-in daemon: secrets in its environment, the daemons' start hook (or not),
#: then a job that reads its parent's environment, as the issue's attack did.
DAEMON = """
import json, os, subprocess, sys
from grid_tasks.security.inspection import on_daemon_start
if sys.argv[1] == "hook":
    on_daemon_start()
job = subprocess.run(["/bin/sh", "-c", "cat /proc/$PPID/environ"], capture_output=True)
print(json.dumps({"code": job.returncode, "out": job.stdout.decode(errors="replace"),
                  "err": job.stderr.decode(errors="replace")}))
"""


def _daemon_as(user, hook: str) -> dict:
    argv = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
            "--", "setpriv", "--", SYSTEM_PYTHON, "-c", DAEMON, hook]
    env = {"PATH": os.defpath, "PYTHONPATH": WORKTREE,
           "GRID_TASKS_REDIS_URL": "redis://:the-grid-password@redis:6379/3"}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, cwd="/")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@needs_root
def test_a_job_of_the_daemons_account_cannot_read_the_daemons_environment(throwaway_user):
    exposed = _daemon_as(throwaway_user, "none")  # the attack works on a plain process
    assert exposed["code"] == 0 and "the-grid-password" in exposed["out"]
    guarded = _daemon_as(throwaway_user, "hook")
    assert guarded["code"] != 0 and "Permission denied" in guarded["err"]
    assert "the-grid-password" not in guarded["out"]


def test_a_worker_turns_non_dumpable_at_start_and_its_jobs_do_not(tmp_path):
    """The worker_init hook, in a process of its own; a child it starts is dumpable."""
    script = ("import subprocess, sys\n"
              "from grid_tasks.celery_app import app\n"
              "from celery.signals import worker_init\n"
              "from grid_tasks.security.inspection import inspectable\n"
              "before = inspectable()\n"
              "worker_init.send(sender=None)\n"
              "child = subprocess.run([sys.executable, '-c', 'from grid_tasks.security."
              "inspection import inspectable; print(inspectable())'], capture_output=True,"
              " text=True).stdout.strip()\n"
              "print(before, inspectable(), child)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert out.stdout.split() == ["True", "False", "True"], out.stderr
