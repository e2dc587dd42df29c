"""Attacks from inside a job: read the node daemon's environment, read a root-only file
through ``stdin`` (issue 20, findings 1 and 2).  The jobs go in through the one door,
as the grid's user, and run as its mapped account."""

from __future__ import annotations

import os
import secrets
from typing import TYPE_CHECKING

from grid_tasks.selftest.rows import Attack, Skip
from grid_tasks.states import JobState

if TYPE_CHECKING:
    from grid_tasks.selftest.target import Target

JOB_TIMEOUT_S = 30.0
#: Variables of a daemon's environment that carry the grid's secrets.
SECRET_NAMES = ("GRID_TASKS_BROKER_URL", "GRID_TASKS_RESULT_BACKEND", "GRID_TASKS_REDIS_URL",
                "GRID_TASKS_DATABASE_URL", "REDIS_URL", "DATABASE_URL", "BROKER_URL")


def _runs_as(target: "Target") -> str:
    return f"as {target.account}" if target.account else "as the invoking user"


class ReadDaemonEnviron(Attack):
    name = "job-reads-daemon-env"
    expected = ("cannot read /proc/$PPID/environ (nor any node daemon's); no broker, Redis "
                "or database URL nor password in its environment")

    def perform(self, target: "Target") -> tuple[bool, str]:
        fg = target.fg
        daemons = " ".join(str(child.pid) for child in fg.nodes.values())
        # no double quote (RSL string) and no "$(" (RSL substitution) in the script
        script = (f"for p in $PPID {daemons}; do if cat /proc/$p/environ > /dev/null 2>&1; "
                  f"then echo READ $p; cat /proc/$p/environ | tr '\\0' ' '; echo; "
                  f"else echo DENIED $p; cat /proc/$p/environ 2>&1 | tail -n 1; fi; done; "
                  f"echo ENV; env")
        rsl = (f'&(executable=/bin/sh)(directory={target.work})'
               f'(arguments="-c" "{script}")')
        job = fg.grid.submit(rsl, rm="rmA")
        status = job.wait(timeout=JOB_TIMEOUT_S)
        out = job.output()
        if status.state is not JobState.DONE or "\nENV\n" not in out:
            return False, (f"the probe job did not run ({status.state.value} "
                           f"{status.gram_error or ''} {status.reason or ''})".strip())
        probes, _, env = out.partition("\nENV\n")
        lines = probes.splitlines()
        read = [line.split()[1] for line in lines if line.startswith("READ ")]
        denied = sum("Permission denied" in line for line in lines)
        names = [n for n in SECRET_NAMES if f"{n}=" in env]
        leaked = fg.redis.password in out
        happened = (f"job {job.id} ran {_runs_as(target)}; environ read of "
                    f"{1 + len(fg.nodes)} daemon pids: {denied} permission denied, read "
                    f"{', '.join(read) or 'none'}; secret variables seen: "
                    f"{', '.join(names) or 'none'}; password "
                    f"{'LEAKED' if leaked else 'not seen'}")
        return (not read and denied == 1 + len(fg.nodes) and not names and not leaked,
                happened)


class RootOnlyStdin(Attack):
    name = "job-stdin-root-file"
    expected = "STDIN_NOT_FOUND; the root-only 0600 file's content not leaked"

    def perform(self, target: "Target") -> tuple[bool, str]:
        if os.geteuid() != 0:
            raise Skip("needs root (jobs must run as an unprivileged mapped account)")
        if target.account is None:
            raise Skip("jobs run as the invoking user, root (no grid map: a throwaway "
                       "account needs useradd/userdel)")
        secret = target.work / "root-only"
        content = f"root-only-{secrets.token_hex(8)}"
        fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(content + "\n")
        rsl = f"&(executable=/bin/cat)(directory={target.work})(stdin={secret})"
        job = target.fg.grid.submit(rsl, rm="rmA")
        status = job.wait(timeout=JOB_TIMEOUT_S)
        leaked = content in job.output() + job.output("stderr")
        happened = (f"job {job.id} {_runs_as(target)}: {status.state.value} "
                    f"{status.gram_error or ''}; content {'LEAKED' if leaked else 'not seen'}")
        return status.gram_error == "STDIN_NOT_FOUND" and not leaked, happened
