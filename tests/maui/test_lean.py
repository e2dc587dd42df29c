"""The lean priority pass decides exactly as the general pass does.

Two schedulers on the same site configuration, one with its :class:`LeanPass` and one
with it switched off (the general pass), are driven in lock step through seeded random
workloads with users, groups and classes (early ends, ends at the walltime, cancels,
simultaneous events) and through prefixes of the real traces under both config files;
after every call their iteration results must be equal.  A deliberately broken lean
pass must be caught, and the lean pass must really have run.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from grid_tasks.maui import Job, Node, Scheduler
from grid_tasks.maui.cfg import parse_maui_config
from grid_tasks.maui.cfgbridge import scheduler_config
from grid_tasks.maui.lean import LeanPass, curve_free
from grid_tasks.maui.profile import StepProfile
from grid_tasks.sim.core import load_config, new_scheduler, to_core_job
from grid_tasks.sim.replay import _jobs
from grid_tasks.sim.conventions import get_convention
from grid_tasks.sim.swf import SWFReader
from tests.maui.lockstep import drive, events_of

ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = ROOT / ".." / "shared" / "workloads"
SITE_FILES = [ROOT / "config" / "maui.cfg", ROOT / "config" / "maui-site.cfg"]


def site_cfg(rng: random.Random) -> str:
    """A random site configuration of the lean pass's class."""
    lines = ["RESERVATIONPOLICY CURRENTHIGHEST",
             f"RESERVATIONDEPTH {rng.choice([0, 1, 2, 4, 100])}",
             f"BACKFILLPOLICY {rng.choice(['FIRSTFIT', 'BESTFIT'])}",
             f"BACKFILLMETRIC {rng.choice(['PROCS', 'PROCSECONDS', 'SECONDS'])}",
             f"QUEUETIMEWEIGHT {rng.choice([0, 1])}", f"XFACTORWEIGHT {rng.choice([1, 10])}"]
    if rng.random() < 0.7:
        lines += [f"FSPOLICY {rng.choice(['DEDICATEDPS', 'DEDICATEDPES'])}",
                  f"FSDEPTH {rng.choice([1, 3])}", "FSINTERVAL 500", "FSDECAY 0.8",
                  "FSWEIGHT 1", "FSUSERWEIGHT 10", "FSGROUPWEIGHT 2", "FSACCOUNTWEIGHT 1",
                  "USERCFG[DEFAULT] FSTARGET=30", "GROUPCFG[g0] FSTARGET=50+",
                  "USERCFG[u2] FSTARGET=10-", "ACCOUNTCFG[a1] FSTARGET=20"]
    if rng.random() < 0.7:
        lines.append(f"USERCFG[DEFAULT] MAXJOB={rng.choice(['1,2', '2,3', '3'])}")
        lines.append(f"GROUPCFG[g1] MAXPROC={rng.choice(['4,6', '6'])}")
    if rng.random() < 0.3:
        lines += ["ACCOUNTCFG[a0] MAXPS=4000,9000", "CLASSCFG[c1] MAXNODE=2,3", "QOSCFG[q1] MAXJOB=1"]
    if rng.random() < 0.3:
        lines.append("USERCFG[u1] MAXIJOB=1 PRIORITY=50")
    if rng.random() < 0.4:  # credential priorities and size: the fixed parts of a priority
        lines += ["CREDWEIGHT 1", "USERWEIGHT 1", "CLASSWEIGHT 2", "QOSWEIGHT 10", "ACCOUNTWEIGHT 1",
                  "CLASSCFG[c1] PRIORITY=20", "QOSCFG[q1] PRIORITY=5", "ACCOUNTCFG[a1] PRIORITY=3",
                  "RESWEIGHT 1", "PROCWEIGHT 5"]
    if rng.random() < 0.2:
        lines.append("NODEAVAILABILITYPOLICY DEDICATED")
    if rng.random() < 0.6:  # a standing reservation nobody in the queue is admitted to
        lines.append("SRCFG[maint] PERIOD=DAY STARTTIME=00:05:00 ENDTIME=00:20:00 "
                     "TASKCOUNT=2 RESOURCES=PROCS:1 USERLIST=root")
    return "\n".join(lines) + "\n"


def workload(rng: random.Random, n: int, size: int) -> list[tuple]:
    """(job, actual run, cancel after or None)."""
    t, out = 0, []
    for i in range(n):
        t += rng.choice([0, 0, 1, 5, 30, 100])
        est = rng.choice([10, 50, 100, 300, 1000])
        run = max(1, min(est, rng.choice([est, est // 2, rng.randint(1, est)])))
        cancel = rng.choice([None] * 8 + [rng.randint(0, 400)])
        ppt = rng.choice([1, 1, 1, 2])
        job = Job(f"j{i}", tasks=max(1, rng.randint(1, size) // ppt), procs_per_task=ppt,
                  walltime=float(est) if rng.random() < 0.2 else est,
                  submit_time=float(t) if rng.random() < 0.2 else t,
                  user=f"u{rng.randint(0, 3)}", group=f"g{rng.randint(0, 1)}",
                  account=rng.choice([None, "a0", "a1"]), job_class=rng.choice([None, "c0", "c1"]),
                  qos=rng.choice([None, None, "q1"]), priority=rng.choice([0, 0, 0, 7]))
        out.append((job, run, cancel))
    return out


def _view(res) -> tuple:
    return ([(s.job_id, s.time, dict(s.allocation)) for s in res.started],
            [(r.name, r.start, r.end) for r in res.reservations_created],
            [(r.name, r.start, r.end) for r in res.reservations_released],
            res.considered, res.throttled, res.backfilled)


def lockstep(pair: list[Scheduler], work: list[tuple]) -> int:
    """Drive the lean scheduler and the general one together; returns the starts.  The
    same values, ints and floats alike (repr); no wake-ups after the last event (a
    standing reservation always has one)."""
    log = drive(pair, events_of([(w[0], w[2]) for w in work]), {w[0].id: w[1] for w in work},
                _view, same=lambda a, b: repr(a) == repr(b), drain=False)
    return sum(len(decided[0]) for _, decided in log)


def pair_for(text: str, size: int, pool: bool = False) -> list[Scheduler]:
    """A scheduler with its fast paths (without its pool unless ``pool``: the lean pass
    decides) and one on the general engine alone."""
    cfg = scheduler_config(parse_maui_config(text))
    pair = [Scheduler([Node("pool", procs=size)], replace(cfg, fast_path=f)) for f in (True, False)]
    if not pool:
        pair[0].pool = None  # a fresh scheduler: nothing to hand over
    return pair


@pytest.mark.parametrize("seed", range(30))
def test_lean_pass_decides_as_the_general_pass(seed):
    rng = random.Random(seed)
    size = rng.choice([4, 8, 16])
    pair = pair_for(site_cfg(rng), size)
    assert isinstance(pair[0].lean, LeanPass) and pair[1].lean is None
    calls = []
    real = pair[0].lean.run
    pair[0].lean.run = lambda *a: (calls.append(1), real(*a))  # type: ignore[method-assign]
    assert lockstep(pair, workload(rng, 60, size)) > 0
    assert pair[0].pool is None and calls  # the lean pass decided, not only the general one


def test_a_broken_lean_pass_is_caught():
    rng = random.Random(3)
    pair = pair_for(site_cfg(random.Random(1)), 8)
    pair[0].lean.fits = lambda job, now: False  # type: ignore[method-assign]
    with pytest.raises(AssertionError):
        lockstep(pair, workload(rng, 60, 8))


def test_a_job_admitted_to_a_hold_takes_the_general_pass():
    text = ("RESERVATIONPOLICY CURRENTHIGHEST\nSRCFG[maint] PERIOD=DAY STARTTIME=00:00:00 "
            "ENDTIME=12:00:00 TASKCOUNT=2 RESOURCES=PROCS:1 USERLIST=root\n")
    sched = pair_for(text, 4)[0]
    sched.submit(Job("a", tasks=1, walltime=10, submit_time=0, user="someone"), 0)
    sched.iterate(0)
    assert sched.lean.takes([Job("b", tasks=1, walltime=10, user="someone")])
    assert not sched.lean.takes([Job("c", tasks=1, walltime=10, user="root")])


def test_curve_free_is_the_running_minimum_from_now():
    prof = StepProfile(8)
    prof.add(10, 20, -5)
    prof.add(30, 40, -8)
    assert curve_free(prof, 0, 8, 10) == 8
    assert curve_free(prof, 0, 8, 11) == 3
    assert curve_free(prof, 15, 6, 100) == 0
    assert curve_free(prof, 0, 2, 5) == 2


def _trace_jobs(path: Path, procs: int, first: int) -> list[tuple]:
    convention = get_convention("pyss", procs)
    with SWFReader(path, first=first) as reader:
        return [(to_core_job(j), j.runtime if j.runtime <= j.estimate else j.estimate, None)
                for j in _jobs(reader, convention, 0.0)]


@pytest.mark.slow
@pytest.mark.parametrize("cfg_path", SITE_FILES, ids=lambda p: p.name)
@pytest.mark.parametrize("trace,procs", [("KTH-SP2-1996-2.1-cln.swf.gz", 100),
                                         ("SDSC-SP2-1998-4.2-cln.swf.gz", 128)])
def test_trace_prefixes_decide_alike(cfg_path, trace, procs):
    path = WORKLOADS / trace
    if not path.exists():
        pytest.skip("shared workloads not found")
    cfg = load_config(config=cfg_path)
    pair = [new_scheduler(procs, replace(cfg, fast_path=f), "c0") for f in (True, False)]
    pair[0].pool = None
    assert pair[0].lean is not None and pair[1].lean is None
    calls = []
    real = pair[0].lean.run
    pair[0].lean.run = lambda *a: (calls.append(1), real(*a))  # type: ignore[method-assign]
    assert lockstep(pair, _trace_jobs(path, procs, 1500)) > 0
    assert len(calls) > 1000
