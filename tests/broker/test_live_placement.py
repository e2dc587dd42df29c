"""The live broker's pure half: placement, batched estimates, planning, RSL rewriting."""

from __future__ import annotations

import pytest

from grid_tasks.broker.coreservation import CoReservation, CoReservationRefused, ReservedPart
from grid_tasks.broker.estimates import Estimates
from grid_tasks.broker.grid_jobs import placed_rsl
from grid_tasks.broker.live import Broker
from grid_tasks.broker.placement import PlacementError, components
from grid_tasks.errors import GridTasksError
from grid_tasks.legion.collection import Collection, Requester
from grid_tasks.rsl import lower
from grid_tasks.topology import parse_topology

GRID = """
[rm.rmA]
site = "north"
[rm.rmA.node.a1]
procs = 4
[rm.rmA.node.a2]
procs = 4

[rm.rmB]
site = "south"
[rm.rmB.node.b1]
procs = 2
features = ["gpu"]

[rm.rmC]
site = "east"
allow_users = "alice"
[rm.rmC.node.c1]
procs = 8
"""

ALICE = Requester("alice", ("users",), "ws1")
BOB = Requester("bob", ("users",), "ws2")
EXE = "(executable=/bin/true)"


@pytest.fixture
def collection() -> Collection:
    return Collection(parse_topology(GRID, "grid.toml"))


def comps(rsl: str, collection: Collection, who: Requester | None = ALICE):
    return components(lower(rsl), collection, who)


def test_unplaced_component_may_go_to_every_rm_open_to_the_requester(collection):
    found = comps(f"+(&{EXE}(count=2)(label=free))(&{EXE}(resourceManagerContact=rmB))",
                  collection)
    assert [c.candidates for c in found] == [("rmA", "rmB", "rmC"), ("rmB",)]
    assert [c.fixed for c in found] == [None, "rmB"]
    assert found[0].duration == 3600 and found[0].label == "free"
    # bob is not admitted by rmC: it is not a candidate for him
    assert comps(f"&{EXE}(count=2)", collection, BOB)[0].candidates == ("rmA", "rmB")
    # an anonymous requester only sees unrestricted RMs
    assert comps(f"&{EXE}", collection, None)[0].candidates == ("rmA", "rmB")


def test_requirements_and_size_narrow_the_candidates(collection):
    gpu = comps(f'&{EXE}(requirements=\'match($features, "gpu")\')', collection)
    assert gpu[0].candidates == ("rmB",)
    south = comps(f"&{EXE}(requirements='$site != \"south\"')(count=6)", collection)
    assert south[0].candidates == ("rmA", "rmC")
    big = comps(f"&{EXE}(count=7)(maxWallTime=2)", collection)
    assert big[0].candidates == ("rmA", "rmC") and big[0].duration == 120
    assert comps(f"&{EXE}(hostCount=2)", collection)[0].candidates == ("rmA",)


@pytest.mark.parametrize("rsl, who, words", [
    (f"&{EXE}(count=99)(label=huge)", ALICE, ["'huge'", "99 processors", "has 8"]),
    (f"&{EXE}(requirements='$site == \"west\"')", ALICE, ["requirements", "match no"]),
    (f"&{EXE}(requirements='$site ==')", ALICE, ["cannot be read"]),
    (f"&{EXE}(resourceManagerContact=rmZ)", ALICE, ["rmZ", "does not know"]),
    (f"&{EXE}(resourceManagerContact=rmC)", BOB, ["rmC", "does not accept bob@ws2"]),
    (f"&{EXE}(resourceManagerContact=rmB)(count=3)", ALICE, ["never run on rmB", "has 2"]),
])
def test_no_rm_can_hold_a_component_is_a_typed_error(collection, rsl, who, words):
    with pytest.raises(PlacementError) as err:
        comps(rsl, collection, who)
    assert isinstance(err.value, GridTasksError)
    for word in words:
        assert word in str(err.value)


# -- batched estimates ------------------------------------------------------------------------

class FakeRMs:
    """Estimates from per-RM busy-until instants: ``procs`` fit from ``free[rm]`` on."""

    def __init__(self, free: dict[str, float], sizes: dict[str, dict[str, int]],
                 silent: tuple[str, ...] = ()) -> None:
        self.free, self.sizes, self.silent = free, sizes, silent
        self.batches: list[list[tuple]] = []

    def __call__(self, asks):
        self.batches.append(list(asks))
        out = []
        for rm, procs, _duration, t in asks:
            if rm in self.silent:
                out.append(None)
                continue
            nodes, alloc, left = self.sizes[rm], {}, procs
            for node, cap in nodes.items():
                take = min(cap, left)
                if take:
                    alloc[node], left = take, left - take
            out.append([] if left else [(max(t, self.free[rm]), alloc)])
        return out


SIZES = {"rmA": {"a1": 4, "a2": 4}, "rmB": {"b1": 2}, "rmC": {"c1": 8}}


def test_estimates_are_fetched_in_one_batch_and_memoized():
    fake = FakeRMs({"rmA": 100.0, "rmB": 50.0, "rmC": 0.0}, SIZES, silent=("rmC",))
    est = Estimates(fake)
    est.prefetch([("rmA", 2, 60.0, 10.0), ("rmB", 2, 60.0, 10.0), ("rmC", 2, 60.0, 10.0)])
    assert len(fake.batches) == 1 and len(fake.batches[0]) == 3
    assert est.dead == {"rmC"} and "rmC" in est.warnings[0]
    assert list(est.estimators(["rmA", "rmB", "rmC"])) == ["rmA", "rmB"]
    a = est.estimator("rmA")
    assert a(2, 60.0, 10.0) == [(100.0, {"a1": 2})]
    assert a(2, 60.0, 100.0) == [(100.0, {"a1": 2})]  # settled by the first answer
    assert len(fake.batches) == 1
    assert a(2, 60.0, 150.0) == [(150.0, {"a1": 2})]  # later than known: one more call
    assert len(fake.batches) == 2
    assert est.estimator("rmB")(3, 60.0, 10.0) == []  # never
    assert est.estimator("rmB")(3, 60.0, 99.0) == []  # never stays never
    assert len(fake.batches) == 3


def broker_with(fake, collection, lead: float = 0.0) -> Broker:
    return Broker(None, None, collection, fetch=fake, lead=lead)  # type: ignore[arg-type]


def test_plan_gives_one_common_start_with_fixed_and_unplaced_components(collection):
    fake = FakeRMs({"rmA": 100.0, "rmB": 50.0, "rmC": 300.0}, SIZES)
    broker = broker_with(fake, collection)
    cs = broker.components(f"+(&{EXE}(resourceManagerContact=rmB)(count=2)(label=fixed))"
                           f"(&{EXE}(count=4)(label=free))", ALICE)
    planned = broker.plan(cs, now=10.0, requester=ALICE)
    best = planned.schedules[0]
    assert best.start == 100.0  # rmB is free at 50 but rmA only at 100: common start
    assert [(p.rm, p.start) for p in best.placements] == [("rmB", 100.0), ("rmA", 100.0)]
    assert [s.start for s in planned.schedules] == sorted(s.start for s in planned.schedules)
    assert planned.schedules[-1].placements[1].rm == "rmC"
    # one batch for all first answers; rmB (2 processors) is no candidate for 'free'
    assert fake.batches[0] == [("rmB", 2, 3600.0, 10.0), ("rmA", 4, 3600.0, 10.0),
                               ("rmC", 4, 3600.0, 10.0)]
    data = planned.to_dict()
    assert data["schedules"][0]["placements"][1] == {
        "label": "free", "rm": "rmA", "start": 100.0, "duration": 3600.0,
        "allocation": {"a1": 4}}


def test_plan_starts_no_earlier_than_now_plus_lead(collection):
    broker = broker_with(FakeRMs({"rmA": 0.0, "rmB": 0.0, "rmC": 0.0}, SIZES), collection,
                         lead=5.0)
    planned = broker.plan(broker.components(f"&{EXE}", ALICE), now=1000.0, requester=ALICE)
    assert planned.not_before == 1005.0 and planned.schedules[0].start == 1005.0


def test_a_component_no_rm_can_ever_start_names_each_rm_verdict(collection):
    fake = FakeRMs({"rmA": 0.0, "rmB": 0.0, "rmC": 0.0}, {**SIZES, "rmA": {"a1": 1}},
                   silent=("rmC",))
    broker = broker_with(fake, collection)
    cs = broker.components(f"&{EXE}(count=3)(label=wide)", ALICE)
    with pytest.raises(PlacementError) as err:
        broker.plan(cs, now=0.0, requester=ALICE)
    text = str(err.value)
    assert "'wide'" in text and "rmA: never" in text and "rmC: no answer" in text
    assert err.value.label == "wide"


def test_placed_rsl_fixes_each_component_to_its_reservation():
    rsl = ("+(&(resourceManagerContact=rmA)(count=1)(executable=/bin/echo)(arguments=$(X)))"
           "(&(count=2)(executable=/bin/true)(requirements='$procs > 1')(label=b))")
    parts = (ReservedPart(0, "subjob0", "rmA", "k.subjob0", 10.0, 70.0, {"a1": 1}, "t0"),
             ReservedPart(1, "b", "rmC", "k.b", 10.0, 70.0, {"c1": 2}, "t1"))
    text = placed_rsl(rsl, CoReservation("k", 10.0, parts), variables={"X": "hi"})
    subs = lower(text)
    assert [(s.rm_contact, s.count, s.label) for s in subs] == [("rmA", 1, None),
                                                                ("rmC", 2, "b")]
    assert "reservation = k.subjob0" in subs[0].gram_rsl()
    assert "arguments = hi" in subs[0].gram_rsl()
    assert "reservation = k.b" in subs[1].gram_rsl()


def test_coreservation_is_json_round_trip_and_refusal_is_typed():
    part = ReservedPart(0, "a", "rmA", "k.a", 10.0, 70.0, {"a1": 2}, "tok", 7)
    co = CoReservation("k", 10.0, (part,), ({"index": 0, "outcome": "confirmed"},), ("w",))
    data = co.to_dict()
    assert data["parts"][0]["reservation"] == "k.a" and data["parts"][0]["procs"] == 2
    assert CoReservation.from_dict(data) == co and co.part("a") is part
    refused = CoReservationRefused("k", [{"index": 0, "start": 10.0, "outcome": "vetoed",
                                          "refusals": [{"rm": "rmB", "reason": "busy"}]}])
    assert "rmB: busy" in str(refused) and refused.to_dict()["job_key"] == "k"
