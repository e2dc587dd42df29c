"""What GRAM's job manager reports, and how: restart requests, the cache, two_phase,
job manager logging, the phase whose error wins when a request has several, messages
in the user's spelling, and the variables only the job manager defines."""

from __future__ import annotations

import pytest

from grid_tasks.rsl import (
    JOB_MANAGER_VARIABLES,
    RSLError,
    deferred_variables,
    lower,
    parse,
    validate,
)
from grid_tasks.rsl.validate import check

from .helpers import position_of


def _error(text: str, variables: dict[str, str] | None = None) -> RSLError:
    with pytest.raises(RSLError) as info:
        validate(text, variables)
    return info.value


@pytest.mark.parametrize(("value", "seconds"), [("yes", 60), ("YES", 60), ("no", 0),
                                                 ("0", 0), ("600", 600)])
def test_two_phase_takes_yes_no_or_seconds(value: str, seconds: int) -> None:
    (job,) = lower(f"&(executable = /bin/sh)(two_phase = {value})")
    assert f"two_phase = {value}" in job.gram_rsl()  # GRAM sees it as written
    assert check(parse(f"&(executable = a)(twoPhase = {value})"))[1][0].values["twophase"] == seconds


def test_loglevel_and_logpattern_are_accepted_and_forwarded() -> None:
    (job,) = lower("&(executable = a)(loglevel = 'ERROR|warn')(logpattern = /tmp/jm.log)")
    assert "loglevel" in job.gram_rsl() and "logpattern" in job.gram_rsl()
    err = _error("&(executable = a)(logLevel = LOUD)")
    assert err.code == "INVALID_ATTR" and "'LOUD' is not a log level" in err.message
    assert err.message.startswith("logLevel:")


def test_gass_cache_with_two_directories_is_rsl_cache_137() -> None:
    err = _error("&(gass_cache = two directories)(executable = /bin/sh)")
    assert err.code == "RSL_CACHE" and err.gram_error.number == 137


@pytest.mark.parametrize(("text", "code", "culprit", "nth"), [
    # the cache is read before anything else: before evaluation...
    ("&(gass_cache = a b)(executable = $(NOPE))", "RSL_CACHE", "b)", 1),
    # ...so evaluation comes next, before attribute names...
    ("&(executabel = x)(directory = $(NOPE))", "RSL_EVALUATION_FAILED", "$(NOPE)", 1),
    # ...names before enumerations and values...
    ("&(count = x)(jobType = weird)(bogus = 1)", "PARAMETER_NOT_SUPPORTED", "bogus", 1),
    # ...enumerations before the required executable...
    ("&(count = x)(jobType = weird)", "INVALID_JOBTYPE", "weird", 1),
    # ...the executable before count (GRAM says UNDEFINED_EXE for &(count=abc))...
    ("&(count = abc)", "UNDEFINED_EXE", "&", 1),
    # ...count before two_phase, two_phase before staging, staging before the rest
    ("&(executable = a)(maxWallTime = 0)(two_phase = x)(count = 0)", "INVALID_COUNT", "0)", 2),
    ("&(executable = a)(file_stage_in = x)(two_phase = x)", "INVALID_TWO_PHASE_COMMIT", "x)", 2),
    ("&(executable = a)(maxWallTime = 0)(file_clean_up = (x))", "RSL_FILE_CLEANUP", "(x", 1),
    # the restart contact is read first of all
    ("&(restart = bogus)(executable = /bin/sh)(gass_cache = a b)", "RSL_RESTART", "bogus", 1),
    ("&(restart = $(C))(gass_cache = a b)", "RSL_CACHE", "b)", 1),
    ("&(restart = bogus)(executable = /bin/sh)", "RSL_RESTART", "bogus", 1),
])
def test_with_several_errors_the_one_gram_reports_wins(text: str, code: str, culprit: str,
                                                      nth: int) -> None:
    err = _error(text)
    assert err.code == code, err
    assert (err.line, err.column) == position_of(text, culprit, nth), err


def test_a_restart_request_is_lowered_without_an_executable() -> None:
    (job,) = lower("&(restart = gram://rmA/jobs/12)(stdout = /tmp/out)(two_phase = yes)")
    assert job.restart == "gram://rmA/jobs/12" and job.executable == ""
    assert job.stdout == "/tmp/out"
    (plain,) = lower("&(executable = a)")
    assert plain.restart is None


def test_messages_use_the_users_spelling_and_say_what_is_allowed() -> None:
    err = _error("&(executable = a)(maxWallTime = -5)")
    assert err.message == "maxWallTime: must be a positive whole number, got '-5'"
    assert err.code == "INVALID_MAX_WALL_TIME"
    err = _error("&(executable = a)(MAX_MEMORY = lots)")
    assert err.message == "MAX_MEMORY: must be a whole number (0 or more), got 'lots'"
    err = _error("&(executable = a)(count = 0)")
    assert err.message == "count: must be a positive whole number, got 0"
    err = _error("&(executable = a)(jobType = weird)")
    assert err.message.startswith("jobType: 'weird' is not one of single")


@pytest.mark.parametrize(("written", "suggested"), [
    ("executabel", "executable"), ("maxWalltime", None), ("maxWallTme", "maxWallTime"),
    ("max_wal_time", "max_wall_time"), ("directoy", "directory"), ("zzz", None)])
def test_an_unknown_attribute_gets_the_closest_known_one(written: str, suggested: str | None) -> None:
    text = f"&(executable = a)({written} = 1)"
    if suggested is None and written == "maxWalltime":  # a spelling of maxWallTime: valid
        validate(text)
        return
    err = _error(text)
    assert err.code == "PARAMETER_NOT_SUPPORTED"
    assert err.message.startswith(f"unknown RSL attribute {written!r}")
    assert err.message.endswith(f"; did you mean {suggested}?" if suggested else f"{written!r}")


def test_job_manager_variables_are_defined_by_deferred_stand_ins() -> None:
    text = ("&(executable = /bin/sh)(directory = $(HOME))(arguments = $(LOGNAME)"
            " $(GLOBUS_GRAM_JOB_CONTACT) $(GLOBUS_GATEKEEPER_HOST) $(GLOBUS_GATEKEEPER_PORT)"
            " $(GLOBUS_GATEKEEPER_SUBJECT))(stdout = $(GLOBUS_CACHED_STDOUT))"
            "(stderr = $(GLOBUS_CACHED_STDERR))")
    assert _error(text).code == "RSL_EVALUATION_FAILED"  # undefined without them
    (job,) = lower(text, deferred_variables())
    assert job.directory == "$(HOME)" and job.stdout == "$(GLOBUS_CACHED_STDOUT)"
    assert job.arguments[1] == "$(GLOBUS_GRAM_JOB_CONTACT)"
    assert set(deferred_variables()) == set(JOB_MANAGER_VARIABLES) >= {"HOME", "LOGNAME"}
    (real,) = lower(text, {name: f"<{name.lower()}>" for name in JOB_MANAGER_VARIABLES})
    assert real.directory == "<home>" and real.arguments[0] == "<logname>"
