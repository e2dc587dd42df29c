"""The compiled conservative core decides exactly as the pure-Python reference.

Two schedulers, one on :class:`ConservativePool` (pure Python) and one on
:class:`CompiledConservativePool` (``grid_tasks.maui._conservative``), are driven in
lock step through seeded random workloads (sizes, walltimes over- and
under-estimated, cancels, submissions arriving out of submit-time order); every
iteration's starts, start times and reservations must be equal.  The core's profile
is also checked operation by operation against :class:`StepProfile`, and a machine
with a C compiler must not silently run the pure core.
"""

from __future__ import annotations

import random
import shutil
import sysconfig

import pytest

from grid_tasks.maui import Job, Node, Scheduler, SchedulerConfig
from grid_tasks.maui import pool_compiled
from grid_tasks.maui.pool_compiled import CompiledConservativePool
from grid_tasks.maui.pool_conservative import ConservativePool
from grid_tasks.maui.profile import StepProfile
from tests.maui.lockstep import drive

needs_compiled = pytest.mark.skipif(pool_compiled._conservative is None, reason="compiled core not built")


def _workload(rng: random.Random, n: int, size: int) -> list[tuple]:
    """(id, arrival, submit time, estimate, actual run, processors, cancel after or None);
    the submit time may lie before the arrival (out of order), the run may exceed the
    estimate (killed at the walltime) or be far shorter."""
    t, out = 0, []
    for i in range(n):
        t += rng.choice([0, 0, 1, 5, 30, 100, 400])
        est = rng.choice([10, 50, 100, 300, 1000, 3600])
        run = rng.choice([est, est * 2, est // 2, rng.randint(1, est), 1])
        submit = t - rng.choice([0] * 5 + [rng.randint(1, 500)])
        cancel = rng.choice([None] * 8 + [rng.randint(0, 600)])
        procs = rng.choice([1, 1, 2, rng.randint(1, size), size // 2 or 1, size])
        out.append((f"j{i}", t, submit, est, min(run, est), procs, cancel))
    return out


def _view(res) -> tuple:
    return ([(s.job_id, s.time) for s in res.started],
            [(r.name, r.start, r.end) for r in res.reservations_created],
            [(r.name, r.start, r.end) for r in res.reservations_released],
            res.considered, res.backfilled)


def _pair(size: int, monkeypatch) -> list[Scheduler]:
    out = []
    for core in ("pure", "compiled"):
        monkeypatch.setattr(pool_compiled, "CORE", core)
        out.append(Scheduler([Node("pool", procs=size)], SchedulerConfig.preset("conservative")))
    assert type(out[0].pool) is ConservativePool and type(out[1].pool) is CompiledConservativePool
    return out


def lockstep(work: list[tuple], size: int, monkeypatch) -> int:
    """Drive a pure and a compiled pool together (asserting equal); returns the starts."""
    pair = _pair(size, monkeypatch)
    events = [(w[1], 0, i, ("submit", Job(w[0], tasks=w[5], walltime=w[3], submit_time=w[2])))
              for i, w in enumerate(work)]  # arrivals: a submit time may lie before
    events += [(w[1] + w[6], 1, i, ("cancel", w[0])) for i, w in enumerate(work) if w[6] is not None]

    def held(both) -> None:
        both(lambda s: [(j.id, r.start, r.end) for j, r in s.pool.held()])

    log = drive(pair, events, {w[0]: w[4] for w in work}, _view, after=held)
    return sum(len(decided[0]) for _, decided in log)


@needs_compiled
@pytest.mark.parametrize("seed", range(40))
def test_compiled_and_pure_cores_decide_alike(seed, monkeypatch):
    rng = random.Random(1000 + seed)
    size = rng.choice([4, 8, 16, 64, 128])
    assert lockstep(_workload(rng, rng.randint(20, 150), size), size, monkeypatch) > 0


@needs_compiled
def test_a_long_busy_workload_decides_alike(monkeypatch):
    """Deep queues: hundreds of reservations moving at every early end."""
    rng = random.Random(99)
    assert lockstep(_workload(rng, 1200, 128), 128, monkeypatch) > 1000


@needs_compiled
def test_the_comparison_catches_a_broken_compiled_pool(monkeypatch):
    monkeypatch.setattr(CompiledConservativePool, "_compress", lambda self, now, res: None)
    with pytest.raises(AssertionError):
        for seed in range(10):
            rng = random.Random(1000 + seed)
            lockstep(_workload(rng, 80, 16), 16, monkeypatch)


@needs_compiled
def test_the_core_profile_edits_and_searches_as_step_profile():
    rng = random.Random(5)
    core, ref = pool_compiled._conservative.Core(32.0), StepProfile(32)
    now = 0.0
    for _ in range(3000):
        a = now + rng.choice([0, rng.randint(0, 500)])
        b = a + rng.choice([0, 1, rng.randint(1, 800), float("inf")])
        d = rng.choice([-4, -1, 1, 3, 0])
        core.add(a, b, d)
        ref.add(a, b, d)
        w, need = rng.randint(1, 300), rng.randint(1, 40)
        assert core.min_over(a, a + w) == ref.min_over(a, a + w)
        assert core.earliest(now, w, need) == ref.earliest(now, w, need)
        now += rng.choice([0, 0, 5])
        if len(ref.times) > 16 and ref.times[16] <= now:
            ref.prune(now)
        core.prune_maybe(now)
        assert core.profile() == (ref.times, ref.vals)


@needs_compiled
def test_the_core_refuses_an_unknown_slot():
    core = pool_compiled._conservative.Core(8.0)
    slot = core.reserve(0.0, 1, 4, 100.0, 10.0)
    assert core.profile() == ([float("-inf"), 10.0, 110.0], [8.0, 4.0, 8.0])
    core.release(slot)
    with pytest.raises(KeyError, match="no reservation in slot"):
        core.release(slot)


def test_the_compiled_core_runs_where_it_could_be_built():
    """A C compiler here and GRID_TASKS_PURE unset: the extension must have been built
    (``pip install -e .`` or ``setup.py build_ext --inplace``) and be the core in use."""
    if pool_compiled.FORCED_PURE:
        assert pool_compiled.CORE == "pure"
        pytest.skip("GRID_TASKS_PURE forces the pure-Python core")
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}): the pure core is the expected fallback")
    assert pool_compiled._conservative is not None, "C compiler present but the core was not built"
    assert pool_compiled.CORE == "compiled"
    sched = Scheduler([Node("pool", procs=8)], SchedulerConfig.preset("conservative"))
    assert type(sched.pool) is CompiledConservativePool
