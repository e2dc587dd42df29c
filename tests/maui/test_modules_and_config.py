"""Pluggable modules (SchedListener style) and building the configuration from maui.cfg."""

import pytest

from grid_tasks.maui import (
    MODULES, BackfillPolicy, Job, Node, Observers, ReservationPolicy, SchedModule, Scheduler,
    SchedulerConfig, SchedulerError, register_module,
)
from grid_tasks.maui.cfg import MauiConfigError, parse_maui_config
from grid_tasks.maui.cfgbridge import scheduler_config


@register_module("recorder-test")
class Recorder(SchedModule):
    def __init__(self):
        self.calls = []

    def on_start(self, scheduler):
        self.calls.append("start")

    def on_iteration(self, scheduler, result):
        self.calls.append(("iter", result.now, [s.job_id for s in result.started]))

    def on_shutdown(self, scheduler):
        self.calls.append("shutdown")


def test_observers_built_by_name_are_called_at_start_each_iteration_and_shutdown():
    sched = Scheduler([Node("n0", procs=2)], SchedulerConfig(modules=("recorder-test", "statistics")))
    observers = Observers(sched.config.modules)
    rec, stats = observers
    observers.started(sched)
    sched.submit(Job("a", walltime=5), now=0)
    observers.iterate(sched, 0)
    observers.iterate(sched, 3)
    observers.shutdown(sched)
    assert rec.calls == ["start", ("iter", 0, ["a"]), ("iter", 3, []), "shutdown"]
    assert (stats.iterations, stats.started, stats.running) == (2, 1, False)


def test_module_objects_can_be_passed_directly_and_unknown_names_fail():
    rec = Recorder()
    assert list(Observers([rec])) == [rec] and rec.calls == []  # nothing called on building
    with pytest.raises(SchedulerError, match="unknown scheduler module 'nope'"):
        Observers(["nope"])
    with pytest.raises(SchedulerError, match="is not a scheduler module"):
        Observers([object()])
    assert "statistics" in MODULES


class Exploding(SchedModule):
    """Raises from every hook: the core must never be the one calling it."""

    def __init__(self):
        self.seen = []

    def on_start(self, scheduler):
        raise RuntimeError("on_start called")

    def on_iteration(self, scheduler, result):
        self.seen.append(result)
        raise RuntimeError("on_iteration called")

    def on_shutdown(self, scheduler):
        raise RuntimeError("on_shutdown called")


def test_the_core_never_calls_module_hooks_and_the_shell_gets_its_result():
    register_module("exploding-test")(Exploding)
    try:
        sched = Scheduler([Node("n0", procs=2)], SchedulerConfig(modules=("exploding-test",)))
        sched.submit(Job("a", walltime=5), now=0)
        sched.submit(Job("b", tasks=2, walltime=5, submit_time=1), now=0)
        result = sched.iterate(0)  # a module named in the configuration is not run by the core
        assert [s.job_id for s in result.started] == ["a"]
        observers = Observers([Exploding()])
        snapshot = (list(result.started), list(result.reservations_created), result.considered)
        with pytest.raises(RuntimeError, match="on_iteration"):
            observers.iterated(sched, result)
        [mod] = observers
        assert mod.seen == [result] and mod.seen[0] is result  # once, with the core's object
        assert (list(result.started), list(result.reservations_created), result.considered) == snapshot
        assert [s.job_id for s in sched.iterate(5).started] == ["b"]  # the core carries on
    finally:
        MODULES.pop("exploding-test", None)


def test_presets_differ_only_in_depth_and_backfill():
    easy, cons, fcfs = (SchedulerConfig.preset(p) for p in ("easy", "conservative", "fcfs"))
    assert (easy.depth, cons.depth) == (1, float("inf"))
    assert easy.reservation_policy is cons.reservation_policy is ReservationPolicy.HIGHEST
    assert fcfs.backfill_policy is BackfillPolicy.NONE
    with pytest.raises(SchedulerError):
        SchedulerConfig.preset("lottery")


MAUI_CFG = """
RESERVATIONDEPTH 4
RESERVATIONPOLICY HIGHEST
BACKFILLPOLICY BESTFIT
NODEALLOCATIONPOLICY MINRESOURCE
NODEAVAILABILITYPOLICY DEDICATED
QUEUETIMEWEIGHT 0
PROCWEIGHT 10
USERWEIGHT 2
FSPOLICY DEDICATEDPS
FSINTERVAL 01:00:00
FSDEPTH 4
FSDECAY 0.5
FSUSERWEIGHT 3
USERCFG[ann] PRIORITY=100 FSTARGET=25+ MAXJOB=2,4 MAXPROC=16
MAXJOBPERUSERCOUNT 8
SRCFG[night] HOSTLIST=n0 STARTTIME=00:00:00 ENDTIME=06:00:00 PERIOD=DAY USERLIST=ops
MODULES statistics
"""


def test_scheduler_config_from_a_maui_cfg():
    cfg = scheduler_config(parse_maui_config(MAUI_CFG, "maui.cfg"))
    assert cfg.reservation_depth == 4 and cfg.reservation_policy is ReservationPolicy.HIGHEST
    assert cfg.backfill_policy is BackfillPolicy.BESTFIT
    assert cfg.node_allocation_policy == "MINRESOURCE"
    assert cfg.availability_policy.value == "DEDICATED"
    assert cfg.weights["PROCWEIGHT"] == 10 and cfg.weights["QUEUETIMEWEIGHT"] == 0
    assert cfg.cred_priority["USER"]["ann"] == 100
    assert (cfg.fs_policy.value, cfg.fs_interval, cfg.fs_depth, cfg.fs_decay) == ("DEDICATEDPS", 3600, 4, 0.5)
    t = cfg.fs_targets["USER"]["ann"]
    assert (t.value, t.mode) == (25.0, "+")
    assert cfg.throttles["USER"]["ann"]["MAXJOB"] == (2, 4)
    assert cfg.throttles["USER"]["DEFAULT"]["MAXJOB"] == (8, 8)
    assert cfg.modules == ("statistics",)
    night = cfg.standing_reservations["night"]
    assert night.nodes == ("n0",) and night.end == 6 * 3600 and "ops" in night.acl.users
    sched = Scheduler([Node("n0", procs=8), Node("n1", procs=8)], cfg)
    sched.submit(Job("a", tasks=4, user="ann", walltime=60), now=0)
    assert [dict(s.allocation) for s in sched.iterate(0).started] == [{"n1": 4}]


def test_unsupported_maui_values_are_typed_errors_with_location():
    cfg = parse_maui_config("BACKFILLPOLICY FIRSTFIT\nNODEALLOCATIONPOLICY CONTIGUOUS\n", "x.cfg")
    with pytest.raises(MauiConfigError) as err:
        scheduler_config(cfg)
    assert err.value.line == 2 and "CONTIGUOUS" in str(err.value)


@pytest.mark.parametrize("metric, started", [("PROCS", {"a"}), ("SECONDS", {"b", "c"})])
def test_backfillmetric_reaches_the_core_and_picks_the_backfill(metric, started):
    """Four processors free beside a blocked job's reservation: BESTFIT by processors
    starts the 4-wide job, by seconds the two long 2-wide ones."""
    cfg = scheduler_config(parse_maui_config(
        f"BACKFILLPOLICY BESTFIT\nBACKFILLMETRIC {metric}\nRESERVATIONDEPTH 1\n", "m.cfg"))
    assert cfg.backfill_metric.value == metric
    sched = Scheduler([Node("n0", procs=10)], cfg)
    sched.submit(Job("r", tasks=6, walltime=100), now=0)
    assert [s.job_id for s in sched.iterate(0).started] == ["r"]
    for name, tasks, walltime in (("big", 10, 10), ("a", 4, 50), ("b", 2, 90), ("c", 2, 80)):
        sched.submit(Job(name, tasks=tasks, walltime=walltime), now=1)
    assert {s.job_id for s in sched.iterate(1).started} == started
