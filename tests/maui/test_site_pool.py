"""The site pool (compiled core) decides exactly as the general engine does.

A scheduler on :class:`SitePool` and one on the general engine alone, on the same site
configuration, are driven in lock step (tests/maui/test_lean.py's driver) through seeded
random workloads and trace prefixes under config/maui.cfg and config/maui-site.cfg;
after every call their results must be equal.  Handing the state over to the general
engine in the middle of a replay must change nothing either, and a broken core must be
caught.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from grid_tasks.maui import Job, Node, Scheduler, SchedulerError
from grid_tasks.maui import pool_site
from grid_tasks.maui.pool_site import SitePool
from grid_tasks.sim.core import load_config, new_scheduler
from tests.maui.test_lean import (
    SITE_FILES, WORKLOADS, _trace_jobs, lockstep, pair_for, site_cfg, workload,
)

compiled = pytest.mark.skipif(pool_site.CORE != "compiled", reason="the site pool's core is not built")


@compiled
@pytest.mark.parametrize("seed", range(40))
def test_site_pool_decides_as_the_general_engine(seed):
    rng = random.Random(seed)
    size = rng.choice([4, 8, 16])
    pair = pair_for(site_cfg(rng), size, pool=True)
    assert isinstance(pair[0].pool, SitePool) and pair[1].pool is None
    assert lockstep(pair, workload(rng, 80, size)) > 0
    assert isinstance(pair[0].pool, SitePool)  # it decided throughout


class _Handover(Scheduler):
    """Leaves the pool for the general engine at its ``at``-th iteration."""

    at = 0

    def iterate(self, now):
        self.at -= 1
        if self.at == 0:
            self._leave_pool(now)
        return super().iterate(now)


@compiled
@pytest.mark.parametrize("seed", range(12))
def test_handing_over_mid_replay_changes_nothing(seed):
    rng = random.Random(100 + seed)
    size = rng.choice([4, 8])
    text = site_cfg(rng)
    pair = pair_for(text, size, pool=True)
    moving = _Handover([Node("pool", procs=size)], pair[0].config)
    moving.at = rng.randint(5, 60)
    assert isinstance(moving.pool, SitePool)
    lockstep([moving, pair[1]], workload(rng, 80, size))
    assert moving.pool is None


@compiled
def test_a_job_the_pool_cannot_model_hands_over():
    pair = pair_for("RESERVATIONPOLICY CURRENTHIGHEST\nXFACTORWEIGHT 10\n", 8, pool=True)
    sched = pair[0]
    sched.submit(Job("a", tasks=2, walltime=100, submit_time=0), 0)
    sched.iterate(0)
    assert isinstance(sched.pool, SitePool)
    sched.submit(Job("b", tasks=2, walltime=100, submit_time=1, mem_per_task=10), 1)
    assert sched.pool is None and set(sched.running_jobs()) == {"a"}
    assert [j.id for j in sched.idle_jobs()] == ["b"]


@compiled
def test_the_pool_refuses_what_the_engine_refuses():
    sched = pair_for("RESERVATIONPOLICY CURRENTHIGHEST\nXFACTORWEIGHT 10\n", 8, pool=True)[0]
    with pytest.raises(SchedulerError, match="not running"):
        sched.job_ended("nobody", 0)
    with pytest.raises(SchedulerError, match="not idle"):
        sched.cancel("nobody", 0)


@compiled
def test_a_broken_core_is_caught():
    rng = random.Random(7)
    pair = pair_for(site_cfg(random.Random(2)), 8, pool=True)
    real = pair[0].pool.core.iterate

    def skewed(now, isfloat):
        started, created, released, considered, throttled = real(now, isfloat)
        return started, created, released, considered + 1, throttled
    pair[0].pool.core = _Wrap(pair[0].pool.core, iterate=skewed)
    with pytest.raises(AssertionError):
        lockstep(pair, workload(rng, 60, 8))


@compiled
def test_slots_of_jobs_gone_are_reused():
    """A long replay (or a live scheduler) keeps only the jobs still known."""
    sched = pair_for("RESERVATIONPOLICY CURRENTHIGHEST\nXFACTORWEIGHT 10\nFSPOLICY DEDICATEDPS\n", 4,
                     pool=True)[0]
    for i in range(300):
        sched.submit(Job(f"j{i}", tasks=2, walltime=10, submit_time=10 * i, user=f"u{i % 3}"), 10 * i)
        sched.iterate(10 * i)
        sched.job_ended(f"j{i}", 10 * i + 5)
        sched.iterate(10 * i + 5)
    assert len(sched.pool.by_slot) <= 2 and not sched.pool.slot


@compiled
def test_the_core_refuses_a_wrong_slot():
    core = pair_for("RESERVATIONPOLICY CURRENTHIGHEST\nXFACTORWEIGHT 10\n", 4, pool=True)[0].pool.core
    with pytest.raises(KeyError, match="no job in that slot"):
        core.ended(7, 0.0, 1)
    slot = core.submit(1, 0.0, 10.0, 0, 2.0, 2, 1, 0.0, 2.0, 2.0, 0.0, (-1,) * 5, (None,) * 2, 1, 1)
    with pytest.raises(ValueError, match="not running"):
        core.ended(slot, 0.0, 1)
    with pytest.raises(ValueError, match="no such credential"):
        core.submit(2, 0.0, 10.0, 0, 2.0, 2, 1, 0.0, 2.0, 2.0, 0.0, (5, -1, -1, -1, -1), (), 1, 1)
    assert core.cancel(slot) is False
    with pytest.raises(KeyError):
        core.cancel(slot)


class _Wrap:
    def __init__(self, inner, **over):
        self._inner, self._over = inner, over

    def __getattr__(self, name):
        return self._over.get(name) or getattr(self._inner, name)


@compiled
@pytest.mark.slow
@pytest.mark.parametrize("cfg_path", SITE_FILES, ids=lambda p: p.name)
@pytest.mark.parametrize("trace,procs", [("KTH-SP2-1996-2.1-cln.swf.gz", 100),
                                         ("SDSC-SP2-1998-4.2-cln.swf.gz", 128),
                                         ("CTC-SP2-1996-3.1-cln.swf.gz", 338)])
def test_trace_prefixes_decide_alike(cfg_path, trace, procs):
    path = WORKLOADS / trace
    if not path.exists():
        pytest.skip("shared workloads not found")
    cfg = load_config(config=cfg_path)
    pair = [new_scheduler(procs, replace(cfg, fast_path=f), "c0") for f in (True, False)]
    assert isinstance(pair[0].pool, SitePool)
    assert lockstep(pair, _trace_jobs(path, procs, 3000)) > 0
    assert isinstance(pair[0].pool, SitePool)


def test_the_compiled_site_core_runs_where_it_could_be_built():
    """Built with the conservative core (``setup.py``): a site's configuration must run on
    it wherever that one was built, unless GRID_TASKS_PURE=1 asks for the lean pass."""
    from grid_tasks.maui import pool_compiled

    if pool_compiled._conservative is None or pool_compiled.FORCED_PURE:
        pytest.skip("no compiled cores here (or GRID_TASKS_PURE)")
    assert pool_site._site is not None, "the conservative core was built but the site core was not"
    sched = new_scheduler(64, load_config(config=SITE_FILES[1]))
    assert type(sched.pool) is SitePool and sched.lean is not None


@compiled
@pytest.mark.parametrize("start", [0, 2.5])
def test_a_restored_job_runs_as_on_the_general_engine(start):
    """Whole seconds stay on the pool; a fractional start hands over (the core counts
    whole seconds), and both decide what the general engine decides."""
    pair = pair_for(site_cfg(random.Random(5)), 8, pool=True)
    for sched in pair:
        sched.restore_running(Job("r", tasks=6, walltime=100, user="u1"), start, {"pool": 6}, now=5)
        with pytest.raises(SchedulerError, match="is not free"):
            sched.restore_running(Job("x", tasks=4, walltime=100, user="u1"), start, {"pool": 4}, now=5)
    assert isinstance(pair[0].pool, SitePool) == (start == 0)
    work = workload(random.Random(6), 40, 8)
    for job, _, _ in work:
        job.submit_time += 5
    assert lockstep(pair, work) > 0


@compiled
@pytest.mark.parametrize("seed", range(6))
def test_a_reservation_admitting_a_waiting_job_hands_over(seed):
    """A standing reservation whose ACL admits a queued user: the pool hands over when the
    occurrence is made (or when such a job is submitted), deciding as the engine does."""
    rng = random.Random(200 + seed)
    text = site_cfg(rng) + ("SRCFG[mine] PERIOD=DAY STARTTIME=00:00:30 ENDTIME=00:08:00 "
                            "TASKCOUNT=2 RESOURCES=PROCS:1 USERLIST=u1\n")
    pair = pair_for(text, 8, pool=True)
    assert isinstance(pair[0].pool, SitePool)
    assert lockstep(pair, workload(rng, 60, 8)) > 0
    assert pair[0].pool is None and pair[0].engine.holds
