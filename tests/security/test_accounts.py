"""run_as: processes really start as the mapped account (root worker), refusals otherwise."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess

import pytest

from grid_tasks.security.accounts import RunAs, run_as
from grid_tasks.security.errors import AccountError, RunAsRefused
from grid_tasks.security.gridmap import GridMap

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                                reason="needs root and useradd")


@needs_root
def test_root_worker_starts_the_job_as_the_mapped_account(throwaway_user):
    gm = GridMap.parse(f'"/CN=Tester" {throwaway_user.pw_name}\n')
    who = run_as(gm.authorize("/CN=Tester", "rmA"))
    assert who.switch and who.uid == throwaway_user.pw_uid and who.gid == throwaway_user.pw_gid
    out = subprocess.run(["id", "-un"], capture_output=True, text=True,
                         check=True, **who.subprocess_kwargs())
    assert out.stdout.strip() == throwaway_user.pw_name
    ids = subprocess.run(["sh", "-c", "id -u; id -g; echo $HOME $USER"], capture_output=True,
                         text=True, check=True, env=who.environment({"PATH": os.defpath}),
                         **who.subprocess_kwargs()).stdout.split()
    assert ids == [str(throwaway_user.pw_uid), str(throwaway_user.pw_gid), "/nonexistent",
                   throwaway_user.pw_name]


@needs_root
def test_preexec_drops_privileges_in_a_forked_child(throwaway_user):
    who = run_as(throwaway_user.pw_name)
    out = subprocess.run(["id", "-u"], capture_output=True, text=True, check=True,
                         preexec_fn=who.preexec())
    assert out.stdout.strip() == str(throwaway_user.pw_uid)


@needs_root
def test_non_root_worker_refuses_another_account_but_runs_its_own(throwaway_user):
    """A child that really runs as the throwaway user asks for 'nobody' and for itself."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: become the unprivileged worker, report, leave without cleanup
        code = 1
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(throwaway_user.pw_gid)
            os.setuid(throwaway_user.pw_uid)
            try:
                run_as("nobody")
                report = "not refused"
            except RunAsRefused as exc:
                report = str(exc)
            own = run_as(throwaway_user.pw_name)
            report += f"\n{own.switch} {own.subprocess_kwargs()}"
            os.write(write, report.encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        report = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, report
    refusal, own = report.split("\n")
    assert f"worker runs as {throwaway_user.pw_name}" in refusal
    assert "not root" in refusal and "'nobody'" in refusal
    assert own == "False {}"


def test_same_account_needs_no_switch():
    me = pwd.getpwuid(os.geteuid()).pw_name
    who = run_as(me, allow_root=True)
    assert isinstance(who, RunAs) and not who.switch
    assert who.subprocess_kwargs() == {} and who.preexec() is None


def test_unknown_and_root_accounts_are_refused():
    gm = GridMap.parse('"/CN=Ghost" nosuchuser_gt\n"/CN=Admin" root\n')
    with pytest.raises(AccountError, match="'nosuchuser_gt' .*does not exist on host"):
        run_as(gm.authorize("/CN=Ghost", "rmA"))
    with pytest.raises(AccountError, match="refusing to run jobs as root"):
        run_as(gm.authorize("/CN=Admin", "rmA"))
    with pytest.raises(RunAsRefused):
        run_as("root", allow_root=True, worker_uid=65534)
