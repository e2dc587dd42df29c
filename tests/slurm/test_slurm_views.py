"""The grid's views with a Slurm RM (no nodes of ours): Maui's queue and job views follow
its jobs, node and resource views list it without crashing, and ``grid-tasks output``
prints what the job wrote.  (The live grid of tests/slurm/conftest.py.)"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from grid_tasks.cli import main
from grid_tasks.scheduling.runner import iterate_here
from grid_tasks.services import Services
from tests.slurm.conftest import RM

VIEWS = (["nodes", "--json"], ["nodes", "--rm", RM], ["query", "$procs >= 0", "--kind", "all"],
         ["showq"], ["showq", "--rm", RM], ["showbf"], ["showres"], ["showstats"],
         ["metrics", "show"], ["diagnose", "-p"], ["diagnose", "-j"], ["diagnose", "-n"],
         ["diagnose", "-f"])


@pytest.fixture(scope="module")
def ended_job(slurm_grid):
    handle = slurm_grid.client.submit(
        '&(executable=/bin/sh)(arguments=-c "echo one; echo two")(jobType=single)', rm=RM)
    handle.wait(timeout=30)
    return handle


@pytest.fixture
def env(slurm_grid) -> dict[str, str]:
    return slurm_grid.env()


@pytest.mark.parametrize("argv", VIEWS, ids=" ".join)
def test_views_of_a_grid_with_a_slurm_rm_work(argv, env, ended_job):
    result = CliRunner().invoke(main, argv, env=env, terminal_width=200)
    assert result.exit_code == 0, result.output


def test_checkjob_and_output_follow_the_slurm_job(env, ended_job):
    result = CliRunner().invoke(main, ["checkjob", str(ended_job.id)], env=env,
                                terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "Completed" in result.stdout and RM in result.stdout
    result = CliRunner().invoke(main, ["output", ended_job.contact], env=env)
    assert result.exit_code == 0, result.output
    assert result.stdout == "one\ntwo\n"
    result = CliRunner().invoke(main, ["nodes", "--json", "--rm", RM], env=env)
    assert json.loads(result.stdout) == []


def test_submit_streams_the_slurm_jobs_output_and_exits_with_its_code(env):
    rsl = ('&(executable=/bin/sh)(jobType=single)'
           '(arguments=-c "echo first; sleep 1; echo second; exit 4")')
    result = CliRunner().invoke(main, ["submit", "-s", "-r", RM, rsl], env=env)
    assert result.exit_code == 4, result.output
    assert "first\nsecond\n" in result.stdout


def test_maui_never_iterates_a_slurm_rm(slurm_grid):
    services = Services(slurm_grid.settings)
    try:
        assert iterate_here(services, RM) == 0  # a native RM runs at least one
    finally:
        services.close()
