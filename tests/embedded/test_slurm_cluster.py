"""Private Slurm clusters from Debian's packages: independent, reachable by an unprivileged
submitter through the private munged, and gone without a trace after stop."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest

from grid_tasks.embedded.slurm_cluster import SlurmCluster, SlurmSite
from grid_tasks.errors import ConfigError
from tests.slurm_site import NEEDS_SLURM, site_fixture

pytestmark = NEEDS_SLURM
site = site_fixture({"a": 2, "b": 2})



def wait_state(cluster: SlurmCluster, job_id: str, wanted: set[str], timeout: float = 15.0) -> str:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        state = cluster.run("squeue", "-h", "-j", job_id, "-o", "%T").stdout.strip()
        if state in wanted or (not state and "GONE" in wanted):
            return state or "GONE"
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} on {cluster.name} is {state!r}, not one of {wanted}")


def test_clusters_are_independent(site: SlurmSite, tmp_path: Path) -> None:
    a, b = site["a"], site["b"]
    assert a.run("sinfo", "-h", "-o", "%N").stdout.split() == ["a[1-2]"]
    assert b.run("sinfo", "-h", "-o", "%N").stdout.split() == ["b[1-2]"]
    out = tmp_path / "a.out"
    sub = a.run("sbatch", "--parsable", "-n2", "--time=1", f"--output={out}",
                "--wrap=echo $SLURM_CLUSTER_NAME $SLURM_JOB_NODELIST")
    assert sub.returncode == 0, sub.stderr
    wait_state(a, sub.stdout.strip(), {"GONE", "COMPLETED"})
    deadline = time.monotonic() + 5
    while not out.exists() or not out.read_text().strip():
        assert time.monotonic() < deadline, "the job's output never appeared"
        time.sleep(0.05)
    assert out.read_text().split()[0] == "a"
    assert b.run("squeue", "-h").stdout.strip() == ""  # a's job is not b's business


def test_estimate_answers_on_stderr(site: SlurmSite) -> None:
    test = site["b"].run("sbatch", "--test-only", "-n2", "--time=1", "--wrap=/bin/true")
    assert test.returncode == 0
    assert "to start at" in test.stderr and "in partition all" in test.stderr



def test_unprivileged_submitter_reaches_munge(site: SlurmSite, throwaway_user, open_dir: Path) -> None:
    """The mapped accounts that will submit are not root: the munge socket and the
    configuration must serve them, and their job runs as them."""
    out = open_dir / "user.out"
    cluster = site["b"]
    sub = cluster.run("runuser", "-u", throwaway_user.pw_name, "--", "sbatch", "--parsable",
                      "-n1", "--time=1", f"--output={out}", "--chdir=/tmp", "--wrap=id -un")
    assert sub.returncode == 0, sub.stderr
    wait_state(cluster, sub.stdout.strip(), {"GONE", "COMPLETED"})
    deadline = time.monotonic() + 5
    while not out.exists() or not out.read_text().strip():
        assert time.monotonic() < deadline, "the user's job left no output"
        time.sleep(0.05)
    assert out.read_text().strip() == throwaway_user.pw_name


def test_stop_leaves_no_process(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    site = SlurmSite(tmp_path / "site", {"c": 1}).start()
    try:
        cluster = site["c"]
        sub = cluster.run("sbatch", "--parsable", "-n1", "--time=5", f"--output={tmp_path}/c.out",
                          f"--wrap=echo $$ > {pidfile}; exec sleep 300")
        assert sub.returncode == 0, sub.stderr
        wait_state(cluster, sub.stdout.strip(), {"RUNNING"})
        deadline = time.monotonic() + 5
        while not pidfile.exists() or not pidfile.read_text().strip():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        job_pid = int(pidfile.read_text())
        daemons = [p.pid for p in cluster.processes] + [site.munge.process.pid]
    finally:
        site.stop()
    for pid in [job_pid, *daemons]:
        assert not _alive(pid), f"process {pid} outlived the site"
    assert site.public is None and not site.munge.socket.exists()


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_cluster_names_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="lowercase letters only"):
        SlurmSite(tmp_path, {"Rm-A": 2})
