"""Priority factors, weights, fairshare and the ``diagnose -p`` breakdown."""

import pytest

from grid_tasks.maui import FSTarget, Job, Node, Scheduler, SchedulerConfig
from grid_tasks.maui.priority import Fairshare


def order(cfg: SchedulerConfig, jobs: list[Job], now: float = 600.0) -> list[str]:
    sched = Scheduler([Node("n0", procs=64)], cfg)
    for job in jobs:
        sched.submit(job, now=job.submit_time)
    return [row.job_id for row in sched.diagnose_priority(now)]


def w(**weights) -> SchedulerConfig:
    base = {"QUEUETIMEWEIGHT": 0}
    base.update(weights)
    return SchedulerConfig(weights=base)


def test_queuetime_puts_the_oldest_first_and_counts_minutes():
    jobs = [Job("new", submit_time=300), Job("old", submit_time=0)]
    assert order(SchedulerConfig(), jobs) == ["old", "new"]
    rows = Scheduler([Node("n", procs=1)])
    rows.submit(Job("x", submit_time=0), now=0)
    assert rows.diagnose_priority(600)[0].components["SERV"] == pytest.approx(10.0)


def test_xfactor_favours_short_jobs_that_waited():
    jobs = [Job("long", walltime=36000, submit_time=0), Job("short", walltime=60, submit_time=100)]
    assert order(w(XFACTORWEIGHT=1), jobs) == ["short", "long"]
    assert order(SchedulerConfig(), jobs) == ["long", "short"]


@pytest.mark.parametrize("weight, big_first", [("PROCWEIGHT", True), ("NODEWEIGHT", True),
                                               ("MEMWEIGHT", True), ("PEWEIGHT", True)])
def test_job_size_weights(weight, big_first):
    small = Job("small", tasks=1, mem_per_task=10, submit_time=0)
    big = Job("big", tasks=8, tasks_per_node=1, mem_per_task=10, submit_time=1)
    got = order(w(**{weight: 1}), [small, big])
    assert got == (["big", "small"] if big_first else ["small", "big"])
    assert order(w(**{weight: -1}), [small, big]) == ["small", "big"]


@pytest.mark.parametrize("kind, field, weight", [
    ("USER", "user", "USERWEIGHT"), ("GROUP", "group", "GROUPWEIGHT"),
    ("ACCOUNT", "account", "ACCOUNTWEIGHT"), ("CLASS", "job_class", "CLASSWEIGHT"),
    ("QOS", "qos", "QOSWEIGHT"),
])
def test_credential_priorities(kind, field, weight):
    jobs = [Job("plain", submit_time=0, **{field: "a"}), Job("vip", submit_time=1, **{field: "b"})]
    cfg = w(**{weight: 10})
    cfg.cred_priority = {kind: {"b": 5}}
    assert order(cfg, jobs) == ["vip", "plain"]
    off = w(**{weight: 10, "CREDWEIGHT": 0})  # the component weight multiplies the subcomponent
    off.cred_priority = {kind: {"b": 5}}
    assert order(off, jobs) == ["plain", "vip"]


def _fs_cfg(**kw) -> SchedulerConfig:
    cfg = w(FSUSERWEIGHT=1)
    cfg.fs_policy = "DEDICATEDPS"
    cfg.fs_targets = {"USER": {"heavy": FSTarget(50), "light": FSTarget(50)}}
    for k, v in kw.items():
        setattr(cfg, k, v)
    return SchedulerConfig(**{f: getattr(cfg, f) for f in cfg.__dataclass_fields__})


def test_fairshare_lowers_heavy_users():
    cfg = _fs_cfg()
    sched = Scheduler([Node("n0", procs=16)], cfg)
    sched.submit(Job("h1", tasks=12, walltime=1000, user="heavy", submit_time=0), now=0)
    sched.submit(Job("l1", tasks=2, walltime=1000, user="light", submit_time=0), now=0)
    sched.iterate(0)
    # too big to start beside them: they stay idle and get ranked
    sched.submit(Job("h2", tasks=3, user="heavy", submit_time=1), now=1)
    sched.submit(Job("l2", tasks=3, user="light", submit_time=2), now=2)
    sched.iterate(500)  # accrues usage up to now
    rows = {r.job_id: r for r in sched.diagnose_priority(500)}
    assert rows["l2"].total > rows["h2"].total
    # 12/14 of the usage: 50 - 85.7 for heavy, 50 - 14.3 for light
    assert rows["h2"].components["FS"] == pytest.approx(50 - 1200 / 14, rel=1e-3)


@pytest.mark.parametrize("mode, heavy_delta, light_delta", [("+", 0.0, 1), ("-", -1, 0.0), ("", -1, 1)])
def test_fairshare_floor_and_ceiling(mode, heavy_delta, light_delta):
    cfg = _fs_cfg(fs_targets={"USER": {"heavy": FSTarget(50, mode), "light": FSTarget(50, mode)}})
    fs = Fairshare(cfg)
    fs.charge(Job("a", user="heavy"), 9, 0, 100)
    fs.charge(Job("b", user="light"), 1, 0, 100)
    for name, want in (("heavy", heavy_delta), ("light", light_delta)):
        got = fs.delta("USER", name, 100)
        assert (got == 0.0) if want == 0.0 else (got * want > 0)


def test_fairshare_depth_interval_and_decay():
    cfg = _fs_cfg(fs_interval=100.0, fs_depth=2, fs_decay=0.5)
    fs = Fairshare(cfg)
    fs.charge(Job("a", user="heavy"), 1, 0, 100)      # window 0: heavy only
    fs.charge(Job("b", user="light"), 1, 100, 200)    # window 1: light only
    # at t=150: current window 1 (weight 1) and window 0 (weight 0.5)
    assert fs.percent("USER", "heavy", 150) == pytest.approx(100 * 50 / 150)
    # at t=250 window 0 is beyond FSDEPTH=2 windows: heavy has no usage left
    assert fs.percent("USER", "heavy", 250) == 0.0
    assert fs.percent("USER", "light", 250) == pytest.approx(100.0)


def test_diagnose_priority_breakdown_sums_components():
    cfg = w(QUEUETIMEWEIGHT=2, PROCWEIGHT=3)
    sched = Scheduler([Node("n0", procs=8)], cfg)
    sched.submit(Job("j", tasks=4, submit_time=0, priority=7), now=0)
    row = sched.diagnose_priority(120)[0]
    assert row.components["SERV"] == pytest.approx(4.0)
    assert row.components["RES"] == pytest.approx(12.0)
    assert row.components["SYSTEM"] == 7
    assert row.total == pytest.approx(sum(row.components.values()))


def test_priority_order_drives_starts():
    cfg = w(PROCWEIGHT=1)
    sched = Scheduler([Node("n0", procs=8)], cfg)
    sched.submit(Job("small", tasks=2, walltime=10, submit_time=0), now=0)
    sched.submit(Job("big", tasks=8, walltime=10, submit_time=1), now=1)
    # 'big' has the higher priority: it starts, and 'small' cannot fit beside it
    assert [s.job_id for s in sched.iterate(1).started] == ["big"]


def test_dedicatedpes_charges_processor_equivalents():
    nodes = [Node("n0", procs=8, memory=8000)]
    for policy, want in (("DEDICATEDPS", 1.0), ("DEDICATEDPES", 4.0)):
        sched = Scheduler(nodes, _fs_cfg(fs_policy=policy))
        # one processor but half the machine's memory: 4 processor equivalents
        sched.submit(Job("fat", tasks=1, mem_per_task=4000, walltime=100, user="heavy"), now=0)
        sched.iterate(0)
        sched.job_ended("fat", now=10)
        assert sched.fairshare.usage["USER"]["heavy"][0] == pytest.approx(10 * want)


def test_pe_weight_uses_processor_equivalents():
    cfg = w(PEWEIGHT=1)
    sched = Scheduler([Node("n0", procs=8, memory=8000)], cfg)
    sched.submit(Job("thin", tasks=2, submit_time=0), now=0)
    sched.submit(Job("fat", tasks=1, mem_per_task=4000, submit_time=1), now=1)
    rows = {r.job_id: r.components["RES"] for r in sched.diagnose_priority(2)}
    assert rows == {"thin": pytest.approx(2.0), "fat": pytest.approx(4.0)}


def test_fast_score_equals_the_breakdown_total():
    import random

    from grid_tasks.maui.priority import breakdown, score

    rng = random.Random(5)
    cfg = SchedulerConfig(
        weights={k: rng.choice([0, 1, 3, -2]) for k in SchedulerConfig().weights},
        cred_priority={"USER": {"a": 5}, "QOS": {"hi": 50}}, fs_policy="DEDICATEDPS",
        fs_targets={"USER": {"a": FSTarget(30, "+"), "b": FSTarget(20)}})
    fs = Fairshare(cfg)
    fs.machine = (64.0, 64000.0, 0.0, 0.0)
    fs.charge(Job("x", user="a"), 8, 0, 500)
    for i in range(200):
        job = Job(f"j{i}", tasks=rng.randint(1, 9), walltime=rng.choice([60, 600]), submit_time=rng.randint(0, 900),
                  user=rng.choice(["a", "b", None]), qos=rng.choice(["hi", None]), mem_per_task=rng.choice([0, 500]),
                  tasks_per_node=rng.choice([None, 2]), priority=rng.randint(0, 3))
        assert score(job, 1000, cfg, fs) == breakdown(job, 1000, cfg, fs).total
