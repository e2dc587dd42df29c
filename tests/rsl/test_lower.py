"""Lowering to typed SubjobRequests and the per-subjob GRAM RSL."""

from __future__ import annotations

import pytest

from grid_tasks.rsl import RSLError, SubjobRequest, lower, parse, unparse, validate
from grid_tasks.states import SubjobCommsType, SubjobStartType

from .helpers import position_of

MULTI = """
+( &(resourceManagerContact = "clusterA:2119/jobmanager-pbs")
    (label = "ocean")
    (count = 16) (host_count = 4) (jobType = mpi)
    (executable = $(HOME)/bin/ocean) (arguments = -grid 512 "out dir")
    (directory = $(HOME)/run) (environment = (OMP_NUM_THREADS 4) (MODE fast))
    (stdin = in.dat) (stdout = (x-gass-cache://o tag) (file:/tmp/o)) (stderr = err.txt)
    (maxWallTime = 90) (max_cpu_time = 80) (max_time = 70) (maxMemory = 2048) (min_memory = 512)
    (queue = batch) (project = climate)
    (subjobStartType = loose-barrier) (subjobCommsType = independent)
    (requirements = ^!$arch == "x86_64"!)
    (dry_run = no) (save_state = yes) )
 ( &(resourceManagerContact = "clusterB:2119/jobmanager-sge")
    (executable = /usr/bin/atmos) )
"""


def test_multi_request_becomes_one_subjob_per_component() -> None:
    jobs = lower(MULTI, {"HOME": "/home/al"})
    assert [j.index for j in jobs] == [0, 1]
    a, b = jobs
    assert isinstance(a, SubjobRequest)
    assert a.rm_contact == "clusterA:2119/jobmanager-pbs" and b.rm_contact == "clusterB:2119/jobmanager-sge"
    assert a.label == "ocean" and b.label is None
    assert (a.count, a.host_count, a.job_type) == (16, 4, "mpi")
    assert a.executable == "/home/al/bin/ocean"
    assert a.arguments == ("-grid", "512", "out dir")
    assert a.directory == "/home/al/run"
    assert a.environment == {"OMP_NUM_THREADS": "4", "MODE": "fast"}
    assert (a.stdin, a.stdout, a.stderr) == ("in.dat", "x-gass-cache://o", "err.txt")
    assert (a.max_wall_time_s, a.max_cpu_time_s, a.max_time_s) == (90 * 60, 80 * 60, 70 * 60)
    assert (a.max_memory_mb, a.min_memory_mb) == (2048, 512)
    assert (a.queue, a.project) == ("batch", "climate")
    assert a.start_type is SubjobStartType.LOOSE_BARRIER
    assert a.comms_type is SubjobCommsType.INDEPENDENT
    assert a.requirements == '$arch == "x86_64"'
    assert [r.attribute for r in a.relations] == ["dry_run", "save_state"]


def test_defaults() -> None:
    (job,) = lower("&(executable = /bin/true)")
    assert job.index == 0 and job.rm_contact is None and job.label is None
    assert (job.count, job.host_count, job.job_type) == (1, None, "multiple")
    assert job.start_type is SubjobStartType.STRICT_BARRIER
    assert job.comms_type is SubjobCommsType.BLOCKING_JOIN
    assert job.arguments == () and job.environment == {} and job.relations == ()
    assert job.max_wall_time_s is None and job.requirements is None


def test_a_bare_relation_is_not_a_request() -> None:
    with pytest.raises(RSLError) as info:
        lower("executable = /bin/date")
    assert info.value.code == "BAD_RSL" and "&(executable = ...)" in info.value.message
    (job,) = lower("&(executable = /bin/date)")
    assert job.executable == "/bin/date"


def test_gram_rsl_drops_duroc_and_broker_attributes_and_forwards_the_rest() -> None:
    a, b = lower(MULTI, {"HOME": "/home/al"})
    gram = parse(a.gram_rsl())
    keys = [op.key for op in gram.operands]
    for gone in ("resourcemanagercontact", "label", "subjobstarttype", "subjobcommstype", "requirements"):
        assert gone not in keys
    assert keys[:3] == ["count", "hostcount", "jobtype"]
    assert "dryrun" in keys and "environment" in keys and "maxwalltime" in keys
    # forwarded verbatim: original spelling, evaluated values, and still valid GRAM RSL
    assert "(maxWallTime = 90)" in a.gram_rsl()
    assert "(executable = /home/al/bin/ocean)" in a.gram_rsl()
    assert validate(a.gram_rsl()) == gram
    assert b.gram_rsl() == "&(executable = /usr/bin/atmos)"


def test_substitutions_are_applied_and_not_forwarded() -> None:
    text = "+(rsl_substitution = (APP /opt/app))(&(rsl_substitution = (V 2))(executable = $(APP)/v$(V)))(&(executable = $(APP)/w))"
    a, b = lower(text)
    assert a.executable == "/opt/app/v2" and b.executable == "/opt/app/w"
    assert "rsl_substitution" not in a.gram_rsl() and a.relations == ()


def test_attribute_spellings_lower_identically() -> None:
    one = lower("&(executable = x)(maxWallTime = 5)(hostCount = 2)(jobType = single)")[0]
    two = lower("&(EXECUTABLE = x)(max_wall_time = 5)(host_count = 2)(job_type = single)")[0]
    assert (one.max_wall_time_s, one.host_count, one.job_type) == (two.max_wall_time_s, two.host_count, two.job_type)
    assert one.max_wall_time_s == 300


def test_a_single_subjob_starts_one_process_whatever_its_count() -> None:
    single, many, mpi = lower("+(&(executable=x)(count=4)(jobType=single))"
                              "(&(executable=x)(count=4))(&(executable=x)(count=3)(jobType=mpi))")
    assert (single.count, single.processes()) == (4, 1)  # count: the processors it holds
    assert (many.processes(), mpi.processes()) == (4, 3)


def test_to_dict_is_json_ready() -> None:
    import json

    (job,) = lower('&(executable = /bin/echo)(arguments = hi)(subjobStartType = no-barrier)(dry_run = yes)')
    data = json.loads(json.dumps(job.to_dict()))
    assert data["arguments"] == ["hi"] and data["start_type"] == "no-barrier"
    assert data["relations"] == ["dry_run = yes"]
    assert data["gram_rsl"] == job.gram_rsl()


def test_errors_carry_source_text_for_the_caret() -> None:
    text = "+(&(executable = a))\n (&(executable = b)(count = none))"
    with pytest.raises(RSLError) as info:
        lower(text, source="coalloc.rsl")
    err = info.value
    assert err.code == "INVALID_COUNT" and (err.line, err.column) == position_of(text, "none")
    assert str(err).startswith("coalloc.rsl:2:")
    assert err.pretty().endswith(" " * (err.column - 1) + "^")


def test_lower_accepts_bytes_and_trees() -> None:
    text = "&(executable = $(GLOBUS_LOCATION)/bin/x)"
    variables = {"GLOBUS_LOCATION": "/g"}
    assert lower(text.encode(), variables)[0].executable == "/g/bin/x"
    assert lower(parse(text), variables)[0].executable == "/g/bin/x"
    assert unparse(parse(text)) == "&(executable = $(GLOBUS_LOCATION) # /bin/x)"
