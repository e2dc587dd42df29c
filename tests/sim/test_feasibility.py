"""Throttles below a job's own size: found before the replay, once per limit, with the
maui.cfg line that set it, and those jobs are exactly the ones the replay leaves waiting."""

from __future__ import annotations

from pathlib import Path

from grid_tasks.maui import Job
from grid_tasks.maui.cfg import parse_maui_config
from grid_tasks.maui.cfgbridge import scheduler_config
from grid_tasks.sim.feasibility import limit_sources, never_start
from grid_tasks.sim.replay import ClusterSpec, Replay
from tests.sim.conftest import swf_line, write_swf


def findings(text: str, jobs: list[Job]) -> list:
    cfg = parse_maui_config(text, "site.cfg")
    return never_start(scheduler_config(cfg).throttles, jobs, sources=limit_sources(cfg))


def job(jid: str, procs: int, user: str = "1", group: str = "1", walltime: float = 100.0,
        job_class: str | None = None) -> Job:
    return Job(id=jid, tasks=procs, walltime=walltime, user=user, group=group,
               job_class=job_class)


def test_one_message_per_limit_naming_its_line_and_the_users() -> None:
    text = "# site\nRESERVATIONDEPTH 1\n\nUSERCFG[DEFAULT]  MAXJOB=8 MAXPROC=16\n"
    jobs = [job(str(i), procs, user=str(user))
            for i, (procs, user) in enumerate([(4, 1), (32, 12), (64, 40), (17, 12), (16, 3)])]
    found = findings(text, jobs)
    assert len(found) == 1  # three jobs, two users, one limit: said once
    hit = found[0]
    assert (hit.kind, hit.entry, hit.key, hit.jobs, hit.largest) == ("USER", "DEFAULT", "MAXPROC", 3, 64)
    assert hit.names == ["12", "40"] and sorted(hit.job_ids) == ["1", "2", "3"]
    assert hit.message() == ("site.cfg:4: USERCFG[DEFAULT] MAXPROC=16 is below 3 job(s) of up "
                             "to 64 processors (users 12, 40): they can never start")


def test_a_users_own_entry_replaces_default_as_in_the_core() -> None:
    text = "USERCFG[DEFAULT] MAXPROC=8\nUSERCFG[alice] MAXJOB=4\nUSERCFG[bob] MAXPROC=2,4\n"
    jobs = [job("a", 32, user="alice"), job("b", 6, user="bob"), job("c", 9, user="carol")]
    found = {(h.entry, h.key): h for h in findings(text, jobs)}
    assert set(found) == {("DEFAULT", "MAXPROC"), ("bob", "MAXPROC")}  # alice has no MAXPROC
    assert found[("bob", "MAXPROC")].message().startswith(
        "site.cfg:3: USERCFG[bob] MAXPROC=2,4 is below 1 job(s) of up to 6 processors (user bob)")
    assert found[("DEFAULT", "MAXPROC")].job_ids == ["c"]


def test_system_wide_limit_is_cited_unless_a_default_entry_overrides_it() -> None:
    jobs = [job("big", 40)]
    alone = findings("MAXPROCPERUSERCOUNT 32\n", jobs)
    assert [h.message().split(" is below")[0] for h in alone] == \
        ["site.cfg:1: MAXPROCPERUSERCOUNT 32"]
    overridden = findings("MAXPROCPERUSERCOUNT 64\nUSERCFG[DEFAULT] MAXPROC=24\n", jobs)
    assert [h.source.line for h in overridden] == [2]  # type: ignore[union-attr]


def test_groups_processor_seconds_and_zero_job_limits() -> None:
    text = ("GROUPCFG[physics] MAXPROC=24,32\nCLASSCFG[short] MAXPS=3600\n"
            "QUEUECFG[closed] MAXJOB=0\n")
    jobs = [job("g", 33, group="physics"), job("ok", 32, group="physics"),
            job("long", 2, job_class="short", walltime=3600), job("q", 1, job_class="closed")]
    found = {(h.kind, h.key): h for h in findings(text, jobs)}
    assert found[("GROUP", "MAXPROC")].job_ids == ["g"]  # the hard limit (32) decides
    assert found[("CLASS", "MAXPS")].job_ids == ["long"] and found[("CLASS", "MAXPS")].largest == 7200
    assert found[("CLASS", "MAXPS")].source.line == 2  # type: ignore[union-attr]
    zero = found[("CLASS", "MAXJOB")]
    assert zero.source.line == 3 and "can never start" in zero.message()  # type: ignore[union-attr]
    assert [h.source.line for h in findings(text, jobs)] == [1, 2, 3]  # type: ignore[union-attr]


def test_no_throttle_no_finding() -> None:
    assert findings("RESERVATIONDEPTH 2\nUSERCFG[DEFAULT] PRIORITY=5\n", [job("x", 512)]) == []


def test_the_jobs_found_are_the_jobs_the_replay_leaves_unfinished(tmp_path: Path) -> None:
    lines = [swf_line(i, 60 * i, 300, procs, req_time=600, user=1 + i % 3)
             for i, procs in enumerate([2, 12, 4, 16, 1, 9, 3, 8, 14, 2], start=1)]
    trace = write_swf(tmp_path / "t.swf", lines, header=["MaxProcs: 16"])
    cfg = tmp_path / "site.cfg"
    cfg.write_text("RESERVATIONDEPTH 1\nUSERCFG[DEFAULT] MAXPROC=8\n")
    replay = Replay([ClusterSpec(trace)], config=cfg)
    found = replay.never_start()
    assert len(found) == 1 and found[0].source.line == 2  # type: ignore[union-attr]
    result = replay.run()
    left = {j.id for c in replay.engine.clusters.values() for j in c.waiting.values()}
    assert left == set(found[0].job_ids) == {"2", "4", "6", "9"}
    assert result.unfinished == 4 and len(result.jobs) == 6
