"""RSL → sbatch: what each attribute becomes, and what is refused before Slurm sees it."""

from __future__ import annotations

import subprocess

import pytest

from grid_tasks.rsl import lower
from grid_tasks.slurm import SlurmUntranslatable, batch_job
from grid_tasks.slurm.translate import minutes


def req(rsl: str):
    return lower(rsl)[0]


def options(rsl: str, **kw) -> list[str]:
    return list(batch_job(req(rsl), name="gt.1", output="/o", error="/e", **kw).options)


def test_multiple_runs_count_tasks_through_srun():
    job = batch_job(req('&(executable=/bin/echo)(arguments="a b" c)(count=3)(maxWallTime=61)'),
                    name="gt.7", output="/o", error="/e", srun="/usr/bin/srun")
    assert "--ntasks=3" in job.options and "--time=61" in job.options
    assert job.script == ("#!/bin/sh\nexec /usr/bin/srun --kill-on-bad-exit=0 /bin/sh -c "
                          "'GRID_TASKS_RANK=$SLURM_PROCID GRID_TASKS_SIZE=$SLURM_NTASKS exec "
                          "\"$@\"' grid-tasks-task /bin/echo 'a b' c\n")


def test_single_is_one_process_on_count_processors():
    opts = options("&(executable=/bin/true)(count=4)(jobType=single)")
    assert "--ntasks=1" in opts and "--cpus-per-task=4" in opts


def test_queue_project_memory_directory_streams():
    opts = options('&(executable=/bin/true)(queue=debug)(project=p1)(maxMemory=512)'
                   '(directory=/tmp)(stdin=/dev/zero)(stdout=/tmp/x)(hostCount=2)',
                   partition="all", account="acct")
    for want in ("--partition=debug", "--account=p1", "--mem-per-cpu=512", "--chdir=/tmp",
                 "--input=/dev/zero", "--output=/tmp/x", "--error=/e", "--nodes=2"):
        assert want in opts, want


def test_topology_partition_and_account_apply_when_the_rsl_names_none():
    opts = options("&(executable=/bin/true)", partition="all", account="acct")
    assert "--partition=all" in opts and "--account=acct" in opts and "--input=/dev/null" in opts


def test_environment_is_the_process_environment_not_argv():
    job = batch_job(req('&(executable=/bin/true)(environment=(SECRET "s3")(PATH /opt/bin))'),
                    name="gt.1", output="/o", error="/e", environment={"HOME": "/home/u", "PATH": "/x"})
    assert job.environment == {"HOME": "/home/u", "PATH": "/opt/bin", "SECRET": "s3"}
    assert not any("s3" in opt for opt in job.options) and "s3" not in job.script
    assert "--export=ALL" in job.options
    assert "--no-requeue" in job.options  # a node failure fails the job: never run twice


def test_walltime_rounds_up_to_whole_minutes():
    assert minutes(1) == 1 and minutes(60) == 1 and minutes(61) == 2 and minutes(0) == 1


@pytest.mark.parametrize("rsl,code", [
    ("&(executable=/bin/true)(maxCpuTime=5)", "INVALID_MAX_CPU_TIME"),
    ("&(executable=/bin/true)(jobType=condor)", "JOBTYPE_NOT_SUPPORTED"),
    ("&(executable=/bin/true)(jobType=single)(hostCount=2)", "INVALID_HOST_COUNT"),
])
def test_untranslatable_requests_are_refused_with_the_gram_error(rsl, code):
    with pytest.raises(SlurmUntranslatable) as err:
        options(rsl)
    assert err.value.code == code


def test_each_task_gets_its_rank_and_size_as_natively(tmp_path):
    # a stand-in srun: runs the task twice, numbered as Slurm numbers them
    srun = tmp_path / "srun"
    srun.write_text('#!/bin/sh\nshift\nfor i in 0 1; do SLURM_PROCID=$i SLURM_NTASKS=2 "$@"; '
                    'done\n')
    srun.chmod(0o755)
    show = "echo $GRID_TASKS_RANK/$GRID_TASKS_SIZE \"$0\""
    many = batch_job(req(f"&(executable=/bin/sh)(arguments=-c '{show}' 'x y')(count=2)"),
                     name="gt.8", output="/o", error="/e", srun=str(srun))
    ran = subprocess.run(["/bin/sh", "-c", many.script], capture_output=True, text=True,
                         env={"GRID_TASKS_RANK": "9"}, check=True)
    assert ran.stdout == "0/2 x y\n1/2 x y\n"
    one = batch_job(req(f"&(executable=/bin/sh)(arguments=-c '{show}' z)(count=3)"
                        "(jobType=single)"), name="gt.9", output="/o", error="/e")
    ran = subprocess.run(["/bin/sh", "-c", one.script], capture_output=True, text=True,
                         check=True)
    assert ran.stdout == "0/1 z\n"  # one process: its subjob is of size 1
