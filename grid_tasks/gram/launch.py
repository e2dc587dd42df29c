"""Launch requests and the host side of starting a job's processes on one node.

A :class:`LaunchRequest` is what the iteration sends to one node: the job's
program and limits, how many of its tasks this node runs, their first global
rank, and ``extra_env`` (DUROC passes its barrier and runtime variables there).
:func:`check_host` reports GRAM's host-side errors before anything starts;
:func:`spawn` starts one process in its own process group that dies with its
job manager (``PR_SET_PDEATHSIG``) and carries the CPU-time and memory rlimits.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import resource
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any

from grid_tasks.errors import GridTasksError
from grid_tasks.gram.errors import LaunchError
from grid_tasks.gram.jobenv import process_env
from grid_tasks.security.accounts import RunAs, run_as
from grid_tasks.security.errors import AccountError
from grid_tasks.security.fscreds import as_account
from grid_tasks.security.fscreds import supported as fscreds_supported

_PR_SET_PDEATHSIG = 1
_libc: Any = None
try:  # Linux: processes die with the thread that started them
    _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
except OSError:  # pragma: no cover - non-Linux hosts only lose the belt to the braces
    _libc = None


@dataclass
class LaunchRequest:
    """One node's part of a job launch ("load and go")."""

    job_id: int
    rm: str
    node: str
    token: str
    executable: str
    tasks: int
    rank_offset: int
    size: int
    nodes: int
    arguments: list[str] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)
    directory: str | None = None
    stdin: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    job_type: str = "multiple"
    max_wall_time_s: float | None = None
    max_cpu_time_s: int | None = None
    max_memory_mb: int | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    #: the local account the grid map chose at submission (None: the worker's own)
    run_as: str | None = None

    def to_dict(self) -> dict[str, Any]:
        # Every field is flat but the three containers, copied here: asdict's recursive
        # deep copy made this a tenth of a millisecond of every launch.
        out = dict(self.__dict__)
        out.update(arguments=list(self.arguments), environment=dict(self.environment),
                   extra_env=dict(self.extra_env))
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LaunchRequest":
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    def process_count(self) -> int:
        """Processes this node starts: one per task, or one in all for ``single``."""
        if self.job_type == "single":
            return 1 if self.rank_offset == 0 else 0
        if self.job_type == "mpi":
            return 1 if self.tasks else 0  # mpirun starts the tasks itself
        return self.tasks

    def process_size(self) -> int:
        """Processes of the whole job (``GRID_TASKS_SIZE``): one for ``single``, whose
        ``size`` counts the processors it holds, not processes (a DUROC barrier waits
        for this many)."""
        return 1 if self.job_type == "single" else self.size


def requests_for(job_id: int, rm: str, token: str, request: dict[str, Any],
                 allocation: dict[str, int], walltime: float | None) -> list[LaunchRequest]:
    """One LaunchRequest per allocated node, ranks numbered across nodes by node name."""
    size = sum(allocation.values())
    out, offset = [], 0
    for node in sorted(allocation):
        tasks = int(allocation[node])
        out.append(LaunchRequest(
            job_id=job_id, rm=rm, node=node, token=token, executable=request["executable"],
            tasks=tasks, rank_offset=offset, size=size, nodes=len(allocation),
            arguments=list(request.get("arguments") or ()),
            environment=dict(request.get("environment") or {}),
            directory=request.get("directory"), stdin=request.get("stdin"),
            stdout=request.get("stdout"), stderr=request.get("stderr"),
            job_type=request.get("job_type") or "multiple",
            max_wall_time_s=request.get("max_wall_time_s") or request.get("max_time_s")
            or walltime, max_cpu_time_s=request.get("max_cpu_time_s"),
            max_memory_mb=request.get("max_memory_mb"),
            extra_env=dict(request.get("extra_env") or {}), run_as=request.get("run_as")))
        offset += tasks
    return out


def _resolve(path: str | None, directory: str) -> str | None:
    """``path`` as the job sees it: relative paths are in the job's directory."""
    if path is None:
        return None
    return path if os.path.isabs(path) else os.path.join(directory, path)


def account_for(req: LaunchRequest) -> RunAs | None:
    """The :class:`~grid_tasks.security.accounts.RunAs` of the job's mapped account, or
    None when it runs as the worker; LaunchError (AUTHORIZATION) when this host cannot."""
    if not req.run_as:
        return None
    try:
        who = run_as(req.run_as)
    except GridTasksError as exc:
        raise LaunchError(f"job {req.job_id} cannot run on {req.node}: {exc}",
                          code="AUTHORIZATION") from None
    if who.switch and not fscreds_supported():
        raise LaunchError(f"job {req.job_id} cannot run as {who.user!r} on {req.node}: this "
                          "host cannot open its files as that account", code="AUTHORIZATION")
    return who


@contextmanager
def _confined(req: LaunchRequest, who: RunAs | None) -> Iterator[None]:
    """Paths are opened and checked as ``who`` within (see :mod:`~grid_tasks.security.fscreds`)."""
    try:
        with as_account(who):
            yield
    except AccountError as exc:
        raise LaunchError(f"job {req.job_id} on {req.node}: {exc}", code="AUTHORIZATION") from None


def _as(who: RunAs | None) -> str:
    return f" for account {who.user}" if who is not None and who.switch else ""


def check_host(req: LaunchRequest, who: RunAs | None = None) -> tuple[str, list[str]]:
    """``(directory, argv)`` after GRAM's host-side checks, made with the rights of the
    account ``who`` the job runs as (None: the worker's); LaunchError with the code.

    The directory defaults to the account's home (the worker's when ``who`` is None)."""
    directory = req.directory or (who.home if who is not None else os.path.expanduser("~"))
    with _confined(req, who):
        return directory, _checked_argv(req, directory, who)


def _checked_argv(req: LaunchRequest, directory: str, who: RunAs | None) -> list[str]:
    # effective_ids: access(2) checks the real uid (root) whatever this thread's fsuid is
    if not os.path.isdir(directory) or not os.access(directory, os.X_OK, effective_ids=True):
        raise LaunchError(f"directory {directory} does not exist or cannot be entered on "
                          f"{req.node}{_as(who)}", code="BAD_DIRECTORY")
    exe = _resolve(req.executable, directory) if "/" in req.executable \
        else shutil.which(req.executable)
    if exe is None or not os.path.exists(exe):
        raise LaunchError(f"executable {req.executable} not found on {req.node}{_as(who)}",
                          code="EXECUTABLE_NOT_FOUND")
    if os.path.isdir(exe) or not os.access(exe, os.X_OK, effective_ids=True):
        raise LaunchError(f"executable {exe} is not executable on {req.node}{_as(who)}",
                          code="EXECUTABLE_PERMISSIONS")
    stdin = _resolve(req.stdin, directory)
    if stdin is not None and not (os.path.isfile(stdin)
                                  and os.access(stdin, os.R_OK, effective_ids=True)):
        raise LaunchError(f"stdin file {stdin} not found or not readable on {req.node}"
                          f"{_as(who)}", code="STDIN_NOT_FOUND")
    argv = [exe, *req.arguments]
    if req.job_type == "mpi":
        mpirun = shutil.which("mpirun")
        if mpirun is None:
            raise LaunchError(f"jobType mpi is not supported on {req.node}: no mpirun on PATH",
                              code="JOBTYPE_NOT_SUPPORTED")
        argv = [mpirun, "-np", str(req.tasks), *argv]
    elif req.job_type not in ("single", "multiple"):
        raise LaunchError(f"jobType {req.job_type} is not supported on {req.node}",
                          code="JOBTYPE_NOT_SUPPORTED")
    return argv


def open_outputs(req: LaunchRequest, directory: str, who: RunAs | None = None
                 ) -> tuple[IO[bytes] | None, IO[bytes] | None]:
    """The RSL stdout/stderr files (appended by every process), opened (or created,
    then owned) by the account ``who``; OPENING_* errors."""
    files: list[IO[bytes] | None] = []
    try:
        with _confined(req, who):
            for name, code in ((req.stdout, "OPENING_STDOUT"), (req.stderr, "OPENING_STDERR")):
                path = _resolve(name, directory)
                files.append(None if path is None or path == "/dev/null"
                             else _open(req, who, path, "ab", code))
    except LaunchError:
        for f in files:
            if f is not None:
                f.close()
        raise
    return files[0], files[1]


def _open(req: LaunchRequest, who: RunAs | None, path: str, mode: str, code: str) -> IO[bytes]:
    try:
        return open(path, mode)  # type: ignore[return-value]
    except OSError as exc:
        raise LaunchError(f"cannot open {path} on {req.node}{_as(who)}: {exc.strerror}",
                          code=code) from None


def _limits(req: LaunchRequest) -> list[tuple[int, int]]:
    limits = []
    if req.max_cpu_time_s:
        limits.append((resource.RLIMIT_CPU, int(req.max_cpu_time_s)))
    if req.max_memory_mb:
        limits.append((resource.RLIMIT_AS, int(req.max_memory_mb) * 1024 * 1024))
    return limits


#: util-linux helpers that set the death signal and rlimits in the child and exec the
#: program: Popen then needs no preexec_fn and can vfork, ~30x cheaper than forking a
#: large worker process (3.4 ms vs 0.1 ms measured).  Without them, preexec_fn does it.
_SETPRIV = shutil.which("setpriv")
_PRLIMIT = shutil.which("prlimit")


def _hard(which: int, soft: int) -> int:
    # CPU: one second of grace so the process gets SIGXCPU (a clear cause) before SIGKILL.
    return soft + 1 if which == resource.RLIMIT_CPU else soft


def _wrapped(argv: list[str], limits: list[tuple[int, int]],
             who: RunAs | None) -> list[str] | None:
    if _SETPRIV is None or (limits and _PRLIMIT is None):
        return None
    prefix = [_SETPRIV, "--pdeathsig", "KILL", "--"]
    if who is not None and who.switch:
        # setpriv keeps its capabilities through the uid switch (it needs them to set
        # the gid and groups after it) up to its exec: the program itself must be found
        # and exec'd by a second, unprivileged step (prlimit, or setpriv again), else a
        # path or file root-only to the account could still be executed.
        prefix = [_SETPRIV, *who.setpriv_args(), "--pdeathsig", "KILL", "--",
                  *(() if limits else prefix)]
    if limits:
        names = {resource.RLIMIT_CPU: "--cpu", resource.RLIMIT_AS: "--as"}
        prefix += [_PRLIMIT, *(f"{names[w]}={v}:{_hard(w, v)}" for w, v in limits), "--"]
    return prefix + argv


def _enter(req: LaunchRequest, directory: str, who: RunAs | None) -> int:
    """An O_PATH descriptor of ``directory``, which this thread's account may enter."""
    fd = None
    try:
        fd = os.open(directory, os.O_PATH | os.O_DIRECTORY)
        if not os.access(".", os.X_OK, dir_fd=fd, effective_ids=True):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        return fd
    except OSError as exc:
        if fd is not None:
            os.close(fd)
        raise LaunchError(f"cannot enter directory {directory} on {req.node}{_as(who)}: "
                          f"{exc.strerror}", code="BAD_DIRECTORY") from None


def _inputs(req: LaunchRequest, directory: str, stdin_path: str | None,
            who: RunAs | None) -> tuple[Any, int | None]:
    """``(stdin, directory fd)`` opened as ``who``: the file or DEVNULL, and, when the
    account differs from the worker's, the job's directory to start in.

    The child changes into its directory while still root (Popen and setpriv switch
    later): through ``/proc/self/fd`` (still open then: Popen closes descriptors after
    ``chdir``) it enters the very directory the account was checked to enter, not
    whatever the path names by then."""
    with _confined(req, who):
        dir_fd = _enter(req, directory, who) if who is not None and who.switch else None
        try:
            stdin = subprocess.DEVNULL if stdin_path is None \
                else _open(req, who, stdin_path, "rb", "STDIN_NOT_FOUND")
        except LaunchError:
            if dir_fd is not None:
                os.close(dir_fd)
            raise
    return stdin, dir_fd


def spawn(req: LaunchRequest, argv: list[str], directory: str, rank: int,
          stdin_path: str | None, who: RunAs | None = None) -> subprocess.Popen[bytes]:
    """Start one process (own process group, rlimits, killed if its starter dies),
    as the account ``who`` (None: as the worker); its stdin and directory are opened
    with the account's rights, relative stdin in ``directory``."""
    limits = _limits(req)
    libc = _libc
    wrapped = _wrapped(argv, limits, who)

    def prepare() -> None:  # runs in the child between fork and exec: keep it tiny
        if libc is not None:
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        for which, value in limits:
            resource.setrlimit(which, (value, _hard(which, value)))

    stdin, dir_fd = _inputs(req, directory, _resolve(stdin_path, directory), who)
    switch = who.subprocess_kwargs() if who is not None and not wrapped else {}
    try:
        return subprocess.Popen(wrapped or argv, env=process_env(req, rank, who),
                                cwd=directory if dir_fd is None else f"/proc/self/fd/{dir_fd}",
                                stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True,
                                preexec_fn=None if wrapped else prepare, close_fds=True,
                                **switch)
    except OSError as exc:
        raise LaunchError(f"cannot start {argv[0]} on {req.node}: {exc.strerror}",
                          code="FORKING_EXECUTABLE") from None
    finally:
        if stdin is not subprocess.DEVNULL:
            stdin.close()
        if dir_fd is not None:
            os.close(dir_fd)


def kill_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    """Kill the process and everything it started (its process group)."""
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
