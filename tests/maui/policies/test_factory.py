"""The policy factory: every configured name maps to its class once; unknown names fail clearly."""

import inspect

import pytest

import grid_tasks.maui.scheduler as scheduler_module
from grid_tasks.maui import AvailabilityPolicy, BackfillPolicy, Node, ReservationPolicy, Scheduler, SchedulerConfig
from grid_tasks.maui.policies import (
    BestFit, Combined, CurrentHighest, Dedicated, FirstFit, Greedy, Highest, Never, NoBackfill,
    UnknownPolicyError, Utilized, availability_policy, backfill_policy, policies_for, queue_policy,
)
from grid_tasks.maui.model import SchedulerError


@pytest.mark.parametrize("name, cls", [
    ("FIRSTFIT", FirstFit), ("BESTFIT", BestFit), ("GREEDY", Greedy), ("NONE", NoBackfill),
    (BackfillPolicy.BESTFIT, BestFit), ("greedy", Greedy),
])
def test_backfill_names_map_to_their_class(name, cls):
    assert type(backfill_policy(name)) is cls


@pytest.mark.parametrize("name, cls", [
    ("HIGHEST", Highest), ("CURRENTHIGHEST", CurrentHighest), ("NEVER", Never),
    (ReservationPolicy.HIGHEST, Highest),
])
def test_queue_names_map_to_their_class(name, cls):
    assert type(queue_policy(name, 3)) is cls


@pytest.mark.parametrize("name, cls", [
    ("COMBINED", Combined), ("DEDICATED", Dedicated), ("UTILIZED", Utilized),
    (AvailabilityPolicy.DEDICATED, Dedicated),
])
def test_availability_names_map_to_their_class(name, cls):
    assert type(availability_policy(name)) is cls


@pytest.mark.parametrize("factory, parameter", [
    (backfill_policy, "BACKFILLPOLICY"), (lambda n: queue_policy(n, 1), "RESERVATIONPOLICY"),
    (availability_policy, "NODEAVAILABILITYPOLICY"),
])
def test_an_unknown_name_names_the_parameter_and_the_choices(factory, parameter):
    with pytest.raises(UnknownPolicyError) as err:
        factory("BOGUS")
    assert parameter in str(err.value) and "'BOGUS'" in str(err.value)
    assert isinstance(err.value, SchedulerError)  # one exception root


def test_a_configuration_with_an_unknown_policy_is_refused_with_that_error():
    with pytest.raises(UnknownPolicyError, match="BACKFILLPOLICY 'SOMETIMES'.*FIRSTFIT"):
        SchedulerConfig(backfill_policy="SOMETIMES")
    with pytest.raises(UnknownPolicyError, match="RESERVATIONPOLICY"):
        SchedulerConfig(reservation_policy="LOWEST")


@pytest.mark.parametrize("preset, queue, depth, backfill", [
    ("fcfs", Highest, 0, NoBackfill), ("easy", Highest, 1, FirstFit),
    ("conservative", Highest, float("inf"), FirstFit),
])
def test_presets_are_configurations_of_the_policy_objects(preset, queue, depth, backfill):
    pol = policies_for(SchedulerConfig.preset(preset))
    assert (type(pol.queue), pol.queue.depth, type(pol.backfill)) == (queue, depth, backfill)


def test_never_has_depth_zero_whatever_the_configured_depth():
    assert queue_policy("NEVER", 7).depth == 0
    assert queue_policy("CURRENTHIGHEST", None).depth == float("inf")


def test_the_scheduler_holds_the_objects_its_configuration_names():
    sched = Scheduler([Node("n0", procs=4)], SchedulerConfig(
        backfill_policy="GREEDY", reservation_policy="CURRENTHIGHEST", reservation_depth=2,
        availability_policy="DEDICATED"))
    assert isinstance(sched.backfill, Greedy)
    assert isinstance(sched.queue_policy, CurrentHighest) and sched.queue_policy.depth == 2
    assert isinstance(sched.engine.avail, Dedicated)


def test_the_scheduler_never_branches_on_policy_names():
    source = inspect.getsource(scheduler_module)
    for enum in ("BackfillPolicy.", "ReservationPolicy.", "AvailabilityPolicy."):
        assert enum not in source
