"""The job manager's RSL variables, as the gatekeeper defines them (no grid needed)."""

from __future__ import annotations

import os
import pwd
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner

from grid_tasks.cli import main
from grid_tasks.events import iter_output
from grid_tasks.gram.errors import JobRefusedError
from grid_tasks.gram.jmvars import (
    JobManagerRequest,
    account_variables,
    gatekeeper_variables,
    mapped_account,
)
from grid_tasks.rsl import JOB_MANAGER_VARIABLES, RSLError
from grid_tasks.settings import Settings

ME = pwd.getpwuid(os.geteuid())


def _settings(**kw) -> Settings:
    return Settings(broker_url="redis://127.0.0.1:6390/4", **kw)


def test_account_variables_are_the_accounts_own() -> None:
    assert account_variables(None) == {"HOME": ME.pw_dir, "LOGNAME": ME.pw_name}
    daemon = pwd.getpwnam("daemon")
    assert account_variables("daemon") == {"HOME": daemon.pw_dir, "LOGNAME": "daemon"}
    assert account_variables("gtnosuchuser") == {"LOGNAME": "gtnosuchuser"}


def test_gatekeeper_variables_name_its_port_and_say_no_subject_unsigned() -> None:
    found = gatekeeper_variables(_settings())
    assert found["GLOBUS_GATEKEEPER_PORT"] == "6390" and found["GLOBUS_GATEKEEPER_HOST"]
    assert found["GLOBUS_GATEKEEPER_SUBJECT"] == ""


def test_no_grid_map_maps_no_one() -> None:
    assert mapped_account(_settings(), "CN=alice", "rmA", None) is None


def test_the_job_managers_values_win_over_the_callers_and_the_contact_binds_late() -> None:
    rsl = ("&(executable = /bin/sh)(directory = $(HOME))(stdout = $(GLOBUS_CACHED_STDOUT))"
           "(arguments = $(GLOBUS_GRAM_JOB_CONTACT) $(GLOBUS_CACHED_STDERR) $(MINE))")
    request = JobManagerRequest.for_account(_settings(), rsl, {"HOME": "/claimed", "MINE": "m"},
                                            "daemon", "<t>")
    first = request.lower()
    assert first.directory == pwd.getpwnam("daemon").pw_dir
    assert first.stdout is None  # the cached output is the captured stream
    assert first.arguments == ("$(GLOBUS_GRAM_JOB_CONTACT)", "$(GLOBUS_CACHED_STDERR)", "m")
    assert request.contact_bound
    bound = request.rebind("gram://rmA/jobs/7")
    assert bound is not None and bound.stdout is None
    assert bound.arguments == ("gram://rmA/jobs/7", "gram://rmA/jobs/7/stderr", "m")
    plain = JobManagerRequest.for_account(_settings(), "&(executable = a)", None, None, "<t>")
    assert not plain.contact_bound and plain.rebind("gram://rmA/jobs/8") is None
    assert set(JOB_MANAGER_VARIABLES) <= set(request.variables)


def test_home_of_an_account_unknown_here_is_undefined() -> None:
    request = JobManagerRequest.for_account(_settings(), "&(executable = a)(directory = $(HOME))",
                                            None, "gtnosuchuser", "<t>")
    with pytest.raises(RSLError) as info:
        request.lower()
    assert info.value.code == "RSL_EVALUATION_FAILED" and "$(HOME)" in info.value.message


# -- on the live grid: the gatekeeper evaluates, the job runs there --------------------

def _stdout(grid, job_id: int) -> list[str]:
    return [line.text.rstrip("\n") for line in iter_output(grid.redis, job_id)
            if line.stream == "stdout"]


def test_submit_directory_home_runs_in_the_accounts_home(module_grid):
    text = ("&(executable=/bin/sh)(directory=$(HOME))(stdout=$(GLOBUS_CACHED_STDOUT))"
            "(arguments=-c 'pwd; echo \"$HOME\"; echo \"$0 $1 $2\"'"
            " $(LOGNAME) $(GLOBUS_GRAM_JOB_CONTACT) $(GLOBUS_GATEKEEPER_PORT))")
    batch = CliRunner().invoke(main, ["submit", "-r", "rmA", "-b", text],
                               env=module_grid.settings.to_env(), catch_exceptions=False)
    assert batch.exit_code == 0, batch.output
    contact = batch.stdout.strip()
    grid = module_grid.grid
    job = grid.job(contact)
    assert job.wait(timeout=30).state.value == "DONE"
    port = str(urlsplit(module_grid.settings.broker_url).port)
    # the worker runs jobs as its own account here (no grid map): its HOME and name
    assert _stdout(grid, job.id) == [ME.pw_dir, ME.pw_dir, f"{ME.pw_name} {contact} {port}"]


def test_a_caller_cannot_choose_home_and_restart_takes_up_a_known_job(module_grid):
    grid = module_grid.grid
    job = grid.submit("&(executable=/bin/pwd)(directory=$(HOME))", rm="rmB",
                      variables={"HOME": "/tmp"})
    assert job.wait(timeout=30).state.value == "DONE"
    assert _stdout(grid, job.id) == [ME.pw_dir]
    default = grid.submit("&(executable=/bin/pwd)", rm="rmB")  # directory: $(HOME) too
    assert default.wait(timeout=30).state.value == "DONE"
    assert _stdout(grid, default.id) == [ME.pw_dir]
    again = grid.submit(f"&(restart={job.contact})")
    assert (again.id, again.rm) == (job.id, "rmB")
    with pytest.raises(JobRefusedError) as info:
        grid.submit("&(restart=gram://rmB/jobs/99999999)")
    assert info.value.code == "NO_STATE_FILE" and info.value.number == 121
    with pytest.raises(RSLError) as bad:
        grid.submit("&(restart=(bogus format))", rm="rmB")
    assert bad.value.code == "RSL_RESTART"
