"""Starting a job's processes (gram.launch, gram.jobenv) on real processes: what the
job's environment holds, and that its files are opened with its account's rights
(real throwaway accounts when root)."""

from __future__ import annotations

import os
import shutil

import pytest

from grid_tasks.gram.errors import LaunchError
from grid_tasks.gram.launch import LaunchRequest, account_for, check_host, spawn

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                                reason="needs root and useradd")

#: What a node daemon's environment may hold and a job must never see.
GRID_SECRETS = {"REDIS_PASSWORD": "redis-secret", "PGPASSWORD": "pg-secret",
                "DATABASE_URL": "postgresql://grid:db-secret@db/grid",
                "FLOWER_BASIC_AUTH": "admin:flower-secret",
                "AWS_SECRET_ACCESS_KEY": "aws-secret", "CELERY_BROKER_URL": "redis://:b@h/1",
                "GRID_TASKS_BROKER_URL": "redis://:broker-secret@h/1"}


def _request(directory: str, **fields: object) -> LaunchRequest:
    base: dict[str, object] = dict(job_id=7, rm="rmA", node="node1", token="t",
                                   executable="/usr/bin/env", tasks=1, rank_offset=0, size=1,
                                   nodes=1, directory=directory)
    base.update(fields)
    return LaunchRequest(**base)  # type: ignore[arg-type]


def _run(req: LaunchRequest, rank: int = 0) -> tuple[int, str, str]:
    """Start rank ``rank`` of ``req`` as the node would; (exit code, stdout, stderr)."""
    who = account_for(req)
    directory, argv = check_host(req, who)
    proc = spawn(req, argv, directory, rank, req.stdin, who)
    out, err = proc.communicate(timeout=20)
    return proc.returncode, out.decode(), err.decode()


def _env_of(output: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in output.splitlines() if "=" in line)


def test_a_single_process_is_told_it_is_alone_whatever_it_holds(tmp_path):
    """jobType single on 3 processors starts one process: its subjob's size is 1 (a
    DUROC barrier and intra-subjob messages count processes, not processors)."""
    one = _request(str(tmp_path), job_type="single", tasks=3, size=3)
    many = _request(str(tmp_path), tasks=3, size=3)
    assert one.process_count() == 1 and many.process_count() == 3
    sizes = [_env_of(_run(req)[1])["GRID_TASKS_SIZE"] for req in (one, many)]
    assert sizes == ["1", "3"]


def test_the_job_sees_no_secret_of_the_daemon(tmp_path, monkeypatch):
    for name, value in GRID_SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("LC_TIME", "C")
    req = _request(str(tmp_path), environment={"MY_SETTING": "from-rsl"},
                   extra_env={"GRID_TASKS_RUNTIME_URL": "redis://job7:per-job@h/3"})
    code, out, _ = _run(req, rank=0)
    assert code == 0
    env = _env_of(out)
    leaked = [name for name, value in GRID_SECRETS.items() if value in out]
    assert leaked == [], f"the job saw {leaked}"
    assert env["PATH"] == os.environ["PATH"] and env["LANG"] == "C.UTF-8" \
        and env["LC_TIME"] == "C"
    assert env["MY_SETTING"] == "from-rsl"  # the RSL environment
    assert env["GRID_TASKS_RUNTIME_URL"] == "redis://job7:per-job@h/3"  # its own credential
    assert (env["GRID_TASKS_JOB_ID"], env["GRID_TASKS_RANK"], env["GRID_TASKS_NODE"],
            env["GRID_TASKS_RM"], env["GRID_TASKS_SIZE"]) == ("7", "0", "node1", "rmA", "1")
    import pwd

    me = pwd.getpwuid(os.geteuid())
    assert (env["HOME"], env["USER"], env["LOGNAME"], env["SHELL"]) == \
        (me.pw_dir, me.pw_name, me.pw_name, me.pw_shell)
    allowed = {"PATH", "LANG", "LC_TIME", "HOME", "USER", "LOGNAME", "SHELL", "MY_SETTING",
               "LANGUAGE", "TZ", "TMPDIR"}
    extra = {k for k in env if k not in allowed and not k.startswith(("GRID_TASKS_", "LC_"))}
    assert extra <= {"PWD", "SHLVL", "_"}, f"inherited from the daemon: {extra}"


def test_relative_stdin_resolves_in_the_job_directory(tmp_path):
    (tmp_path / "input.txt").write_text("from the job directory\n")
    code, out, _ = _run(_request(str(tmp_path), executable="/bin/cat", stdin="input.txt"))
    assert (code, out) == (0, "from the job directory\n")


@pytest.fixture
def account_dir(throwaway_user, tmp_path_factory):
    """A world-searchable directory under /tmp owned by the throwaway account (pytest's
    own tmp dirs are root-only), removed afterwards."""
    import tempfile

    path = tempfile.mkdtemp(prefix="gt-confine-", dir="/tmp")
    os.chown(path, throwaway_user.pw_uid, throwaway_user.pw_gid)
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@needs_root
def test_a_root_only_stdin_is_not_read_for_an_unprivileged_job(throwaway_user, account_dir):
    secret = os.path.join(account_dir, "secret")
    with open(secret, "w") as f:
        f.write("root only\n")
    os.chmod(secret, 0o600)  # root's
    req = _request(account_dir, executable="/bin/cat", stdin=secret,
                   run_as=throwaway_user.pw_name)
    with pytest.raises(LaunchError, match="not readable") as caught:
        _run(req)
    assert caught.value.code == "STDIN_NOT_FOUND"
    assert throwaway_user.pw_name in str(caught.value)
    who = account_for(req)
    # even past check_host (a file swapped in between), spawn opens it as the account
    with pytest.raises(LaunchError) as caught:
        spawn(req, ["/bin/cat"], account_dir, 0, secret, who)
    assert caught.value.code == "STDIN_NOT_FOUND" and "Permission denied" in str(caught.value)


@needs_root
def test_the_job_runs_without_root_rights_in_its_directory(throwaway_user, account_dir):
    """setpriv switches real, effective and saved ids and leaves no capability."""
    req = _request(account_dir, executable="/bin/sh", run_as=throwaway_user.pw_name,
                   arguments=["-c", "pwd; grep -E '^(Uid|Gid|Groups|CapEff):' /proc/self/status"])
    code, out, err = _run(req)
    assert code == 0, err
    lines = out.splitlines()
    uid, gid = throwaway_user.pw_uid, throwaway_user.pw_gid
    assert lines[0] == account_dir
    assert lines[1].split()[1:] == [str(uid)] * 4 and lines[2].split()[1:] == [str(gid)] * 4
    assert lines[3].split()[1:] == [] and lines[4].split()[1] == "0000000000000000"


@needs_root
def test_checks_are_made_with_the_account_rights(throwaway_user, account_dir, tmp_path):
    """A root-only (0700) directory: the account can neither enter it nor run from it."""
    tmp_path.chmod(0o700)
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\necho ran\n")
    tool.chmod(0o755)
    name = throwaway_user.pw_name
    cases = [(_request(str(tmp_path), executable="/bin/true", run_as=name), "BAD_DIRECTORY"),
             (_request(account_dir, executable=str(tool), run_as=name), "EXECUTABLE_NOT_FOUND")]
    for req, code in cases:
        with pytest.raises(LaunchError) as caught:
            _run(req)
        assert caught.value.code == code, str(caught.value)
    assert _run(_request(account_dir, executable=str(tool)))[1] == "ran\n"  # root may


@needs_root
def test_a_program_the_account_cannot_reach_never_runs(throwaway_user, account_dir, tmp_path):
    """Past check_host (say a symlink swapped in between), the program is still looked up
    and exec'd with the account's rights only: one in a root-only folder does not run."""
    tmp_path.chmod(0o700)
    tool = tmp_path / "tool"  # a binary: a script's interpreter would not read it anyway
    shutil.copy("/bin/echo", tool)
    tool.chmod(0o755)
    for limits in ({}, {"max_cpu_time_s": 5}):
        req = _request(account_dir, executable=str(tool), run_as=throwaway_user.pw_name,
                       **limits)
        try:
            proc = spawn(req, [str(tool), "ran"], account_dir, 0, None, account_for(req))
        except LaunchError as exc:  # Popen's own switch (no setpriv here) fails at exec
            assert exc.code == "FORKING_EXECUTABLE"
            continue
        out, err = proc.communicate(timeout=20)
        assert b"ran" not in out and proc.returncode != 0, (limits, out, err)
        assert b"Permission denied" in err
