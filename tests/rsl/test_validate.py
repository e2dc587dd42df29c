"""GRAM validation: each mistake earns the GRAM protocol error a job manager reports."""

from __future__ import annotations

import pytest

from grid_tasks.rsl import GramError, RSLError, parse, validate
from grid_tasks.rsl.attributes import RULES

from .helpers import position_of

EXE = "&(executable = /bin/app)"


def job(extra: str) -> str:
    return EXE + extra


# (text, expected code, culprit whose first/nth occurrence is the reported position, occurrence)
CASES = [
    # structure
    (job("(count < 4)"), "BAD_RSL", "count", 1),
    (job("(|(count = 1)(count = 2))"), "BAD_RSL", "|", 1),
    ("|(executable = a)(executable = b)", "BAD_RSL", "|", 1),
    ("+(&(executable = a))(+(&(executable = b)))", "BAD_RSL", "+", 2),
    ("+(&(executable = a))(|(executable = b))", "BAD_RSL", "|", 1),
    ("+(rsl_substitution = (A a))", "BAD_RSL", "+", 1),
    (job("(foo = bar)"), "PARAMETER_NOT_SUPPORTED", "foo", 1),
    ("&(arguments = -l)(count = 2)", "UNDEFINED_EXE", "&", 1),
    ("+(&(executable = a))(&(count = 2))", "UNDEFINED_EXE", "&", 2),
    ("&(executable = (a b))", "RSL_EXECUTABLE", "(a", 1),
    ("&(executable = a b)", "RSL_EXECUTABLE", "b)", 1),
    ('&(executable = "  ")', "RSL_EXECUTABLE", '"', 1),
    (job("(Executable = /bin/other)"), "RSL_EXECUTABLE", "Executable", 1),
    (job("(executable = $(NOPE))"), "RSL_EVALUATION_FAILED", "$(NOPE)", 1),
    # numbers
    (job("(count = 0)"), "INVALID_COUNT", "0", 1),
    (job("(count = many)"), "INVALID_COUNT", "many", 1),
    (job("(count = -2)"), "INVALID_COUNT", "-2", 1),
    (job("(count = 1 2)"), "RSL_COUNT", "2", 1),
    (job("(count = (1))"), "RSL_COUNT", "(1", 1),
    (job("(host_count = 0)"), "INVALID_HOST_COUNT", "0", 1),
    (job("(hostCount = (2 3))"), "RSL_HOST_COUNT", "(2", 1),
    (job("(max_time = 1.5)"), "INVALID_MAXTIME", "1.5", 1),
    (job("(maxWallTime = 0)"), "INVALID_MAX_WALL_TIME", "0", 1),
    (job("(max_wall_time = a b)"), "RSL_MAX_WALL_TIME", "b)", 1),
    (job("(maxCpuTime = soon)"), "INVALID_MAX_CPU_TIME", "soon", 1),
    (job("(max_memory = 1G)"), "INVALID_MAX_MEMORY", "1G", 1),
    (job("(minMemory = -1)"), "INVALID_MIN_MEMORY", "-1", 1),
    (job("(min_memory = (1))"), "RSL_MIN_MEMORY", "(1", 1),
    (job("(two_phase = x)"), "INVALID_TWO_PHASE_COMMIT", "x)", 1),
    (job("(two_phase = (1))"), "RSL_TWO_PHASE_COMMIT", "(1", 1),
    (job("(max_time = 1 2)"), "RSL_MAXTIME", "2", 1),
    (job("(max_cpu_time = (3))"), "RSL_MAX_CPU_TIME", "(3", 1),
    (job("(maxMemory = (4))"), "RSL_MAX_MEMORY", "(4", 1),
    (job("(proxy_timeout = (5))"), "RSL_PROXY_TIMEOUT", "(5", 1),
    (job("(gram_my_job = (collective))"), "RSL_MYJOB", "(collective", 1),
    (job("(save_state = yes no)"), "RSL_SAVE_STATE", "no", 1),
    (job("(proxy_timeout = x)"), "INVALID_PROXY_TIMEOUT", "x)", 1),
    (job("(expiration = x)"), "RSL_SCHEDULER_SPECIFIC", "x)", 1),
    (job('(reservation = "")'), "RSL_SCHEDULER_SPECIFIC", '"")', 1),
    # enumerations
    (job("(jobType = parallel)"), "INVALID_JOBTYPE", "parallel", 1),
    (job("(job_type = (mpi))"), "RSL_JOBTYPE", "(mpi", 1),
    (job("(gram_my_job = solo)"), "INVALID_GRAM_MYJOB", "solo", 1),
    (job("(dry_run = maybe)"), "RSL_SCHEDULER_SPECIFIC", "maybe", 1),
    (job("(dry_run = (yes))"), "RSL_DRYRUN", "(yes", 1),
    (job("(save_state = sometimes)"), "INVALID_SAVE_STATE", "sometimes", 1),
    # strings and lists
    (job("(arguments = a (b c))"), "RSL_ARGUMENTS", "(b", 1),
    (job("(directory = a b)"), "RSL_DIRECTORY", "b)", 1),
    (job("(stdin = (a))"), "RSL_STDIN", "(a", 1),
    (job("(stdout = a b)"), "RSL_STDOUT", "a b", 1),
    (job("(stdout = (a b c))"), "RSL_STDOUT", "(a", 1),
    (job("(stderr = (x-gass-cache://e tag) ((nested)))"), "RSL_STDERR", "((", 1),
    (job("(queue = a b)"), "RSL_QUEUE", "b)", 1),
    (job("(project = (p))"), "RSL_PROJECT", "(p)", 1),
    (job("(scratch_dir = (s))"), "RSL_SCRATCH", "(s)", 1),
    (job("(gass_cache = (g))"), "RSL_CACHE", "(g)", 1),
    (job("(remote_io_url = (u))"), "RSL_REMOTE_IO_URL", "(u", 1),
    (job("(library_path = (l m))"), "RSL_SCHEDULER_SPECIFIC", "(l m", 1),
    (job("(environment = A 1)"), "RSL_ENVIRONMENT", "A", 1),
    (job("(environment = (A 1) (B))"), "RSL_ENVIRONMENT", "(B", 1),
    (job("(environment = (A (1 2)))"), "RSL_ENVIRONMENT", "(A", 1),
    (job('(environment = ("" 1))'), "BAD_RSL_ENVIRONMENT", '""', 1),
    (job('(environment = ("A=B" 1))'), "BAD_RSL_ENVIRONMENT", '"A=B"', 1),
    (job("(file_stage_in = (gsiftp://h/a))"), "RSL_FILE_STAGE_IN", "(gsiftp", 1),
    (job("(file_stage_in_shared = x)"), "RSL_FILE_STAGE_IN_SHARED", "x)", 1),
    (job("(file_stage_out = (a b c))"), "RSL_FILE_STAGE_OUT", "(a", 1),
    (job("(file_clean_up = a (b))"), "RSL_FILE_CLEANUP", "(b", 1),
    # restart requests and restart-only attributes
    (job("(restart = https://h:1/2)"), "RSL_RESTART", "https", 1),
    ("&(restart = (bogus format))", "RSL_RESTART", "(bogus", 1),
    ("&(restart = gram://rmA/jobs/1)(executable = /bin/sh)", "INVALID_RESTART_ATTRIBUTE", "executable", 1),
    ("&(restart = gram://rmA/jobs/1)(stdout_position = x)", "INVALID_STDOUT_POSITION", "x)", 1),
    ("&(restart = gram://rmA/jobs/1)(stderr_position = (0))", "RSL_STDERR_POSITION", "(0", 1),
    ("&(restart = gram://rmA/jobs/1)(stdoutPosition = 1 2)", "RSL_STDOUT_POSITION", "2)", 1),
    ("&(restart = gram://rmA/jobs/1)(stderr_position = -1)", "INVALID_STDERR_POSITION", "-1", 1),
    ("&(restart = gram://rmA/jobs/1)(restartcontacts = (a b))", "RSL_SCHEDULER_SPECIFIC", "(a", 1),
    (job("(stdout_position = 0)"), "INVALID_SUBMIT_ATTRIBUTE", "stdout_position", 1),
    (job("(stderrPosition = 0)"), "INVALID_SUBMIT_ATTRIBUTE", "stderrPosition", 1),
    # DUROC and broker attributes
    (job('(resourceManagerContact = "")'), "BAD_GATEKEEPER_CONTACT", '""', 1),
    (job("(resourceManagerContact = a b)"), "BAD_GATEKEEPER_CONTACT", "b)", 1),
    (job("(subjobStartType = eventually)"), "BAD_RSL", "eventually", 1),
    (job("(subjobCommsType = loud)"), "BAD_RSL", "loud", 1),
    (job("(label = (l))"), "BAD_RSL", "(l)", 1),
    (job('(requirements = "")'), "BAD_RSL", '""', 1),
    # job manager logging (GRAM5)
    (job("(loglevel = ERROR|LOUD)"), "INVALID_ATTR", "ERROR", 1),
    (job("(logpattern = a b)"), "INVALID_ATTR", "b)", 1),
    # structure GRAM refuses
    ("executable = /bin/sh", "BAD_RSL", "executable", 1),
    (job("(directory = $(HOME /tmp))"), "RSL_EVALUATION_FAILED", "$(HOME", 1),
    # text that is not RSL at all
    ("&(executable = ", "BAD_RSL", None, 1),
    ("  ", "ZERO_LENGTH_RSL", None, 1),
]


@pytest.mark.parametrize(("text", "code", "culprit", "occurrence"), CASES, ids=[f"{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_rejections_carry_gram_code_and_position(text: str, code: str, culprit: str | None, occurrence: int) -> None:
    with pytest.raises(RSLError) as info:
        validate(text)
    err = info.value
    assert err.code == code, err
    assert GramError(err.code).number > 0
    if culprit is not None:
        assert (err.line, err.column) == position_of(text, culprit, occurrence), err
    assert err.message and err.text == text


def test_every_code_a_rule_can_emit_is_exercised() -> None:
    from grid_tasks.rsl.attributes import RESTART, ChoiceRule, IntRule, PairsRule, StringRule, SubstitutionRule

    emitted = set()
    for rule in RULES.values():
        if rule.when == RESTART:
            emitted.add("INVALID_SUBMIT_ATTRIBUTE")
        if isinstance(rule, SubstitutionRule):
            continue
        emitted.add(rule.shape_error.value)
        if isinstance(rule, (IntRule, ChoiceRule)) or (isinstance(rule, StringRule) and rule.nonempty):
            emitted.add(rule.value_error.value)
        if isinstance(rule, PairsRule) and rule.bad_name_error:
            emitted.add(rule.bad_name_error.value)
    assert emitted <= {case[1] for case in CASES}


def test_error_positions_on_later_lines() -> None:
    text = "&(executable = /bin/app)\n (count = 2)\n   (jobType = weird)"
    with pytest.raises(RSLError) as info:
        validate(text)
    assert (info.value.line, info.value.column) == position_of(text, "weird") == (3, 15)
    assert info.value.pretty().splitlines()[-1] == " " * 14 + "^"


def test_every_gram_attribute_is_accepted_when_well_formed() -> None:
    text = """&(executable = /bin/app)(arguments = -v "two words")(directory = /tmp)(stdin = /dev/null)
      (stdout = (x-gass-cache://out tag) (file:/tmp/out))(stderr = err.txt)(count = 4)(host_count = 2)
      (environment = (A 1) (B "x y"))(max_time = 5)(max_wall_time = 10)(max_cpu_time = 8)
      (max_memory = 512)(min_memory = 0)(job_type = mpi)(gram_my_job = collective)(queue = batch)
      (project = grid)(dry_run = yes)(save_state = no)(two_phase = 600)(remote_io_url = https://h/x)
      (scratch_dir = /scratch)(gass_cache = /cache)(file_stage_in = (gsiftp://h/a a))
      (file_stage_in_shared = (gsiftp://h/b b))(file_stage_out = (c gsiftp://h/c))(file_clean_up = a b)
      (proxy_timeout = 60)(library_path = /lib /usr/lib)(username = alice)(savejobdescription = no)
      (expiration = 3600)(rsl_substitution = (X y))(resourceManagerContact = "host:2119/jobmanager-pbs")
      (label = part1)(subjobStartType = loose-barrier)(subjobCommsType = independent)
      (requirements = '$os == "Linux"')(reservation = grid.7)(loglevel = error|WARN)
      (logpattern = "$(GLOBUS_LOCATION)/var/gram_$(LOGNAME).log")"""
    spec = validate(text, {"GLOBUS_LOCATION": "/g", "LOGNAME": "al"})
    seen = {op.key for op in spec.operands}
    restart_only = {"restart", "stdoutposition", "stderrposition", "restartcontacts"}
    assert seen == set(RULES) - restart_only


def test_attribute_spellings_are_equivalent() -> None:
    for spelling in ("maxWallTime", "max_wall_time", "MAX_WALL_TIME", "Max_WallTime"):
        validate(job(f"({spelling} = 10)"))
        with pytest.raises(RSLError) as info:
            validate(job(f"({spelling} = 0)"))
        assert info.value.code == "INVALID_MAX_WALL_TIME"


def test_multirequest_validates() -> None:
    out = validate("+(&(executable = a)(count = 2))(executable = b)")
    assert len(out.operands) == 2


def test_validate_accepts_a_tree_and_evaluates_it() -> None:
    spec = parse("&(executable = $(HOME)/a.out)")
    assert validate(spec, {"HOME": "/h"}) == parse("&(executable = /h/a.out)")
