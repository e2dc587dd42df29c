"""The live broker's confirm hook: RM reservations kept per placement across candidates.

The RMs are stand-ins here (the live test drives real ones): they answer ``reserve``
from a script and record ``release`` calls, so every path (refusal, time-out, token
change) is exercised deterministically.
"""

from __future__ import annotations

from grid_tasks.broker.holds import RmHolds, part_name
from grid_tasks.broker.planner import Placement, Schedule
from grid_tasks.broker.remote import Outcome


class ScriptedRMs:
    """``reserve`` answers by (rm, name): 'ok', 'refuse' or 'timeout'; releases recorded."""

    def __init__(self, script: dict[tuple[str, str], list[str]]) -> None:
        self.script = script
        self.reserved: list[str] = []
        self.released: list[tuple[str, str, str]] = []

    def reserve(self, calls):
        out = []
        for kw in calls:
            self.reserved.append(kw["name"])
            verdict = self.script.get((kw["rm"], kw["name"]), ["ok"]).pop(0)
            if verdict == "ok":
                out.append(Outcome(value={"rm": kw["rm"], "name": kw["name"], "id": 1,
                                          "start": kw["start"],
                                          "end": kw["start"] + kw["duration"],
                                          "allocation": kw["allocation"]}))
            elif verdict == "refuse":
                out.append(Outcome(error=RuntimeError("busy")))
            else:
                out.append(Outcome(timed_out=True))
        return out

    def release(self, calls):
        self.released += [(kw["rm"], kw["name"], kw["token"]) for kw in calls]
        return [Outcome(value=True) for _ in calls]


class Tokens:
    """The enactor side: which token each placement holds."""

    def __init__(self) -> None:
        self.ids: dict[Placement, str] = {}

    def token_of(self, placement: Placement) -> str:
        return self.ids.setdefault(placement, f"tok{len(self.ids)}")


def place(subjob: int, rm: str, node: str, start: float = 100.0) -> Placement:
    return Placement(subjob, rm, start, 60.0, ((node, 1),))


KEEP, ON_B, ON_A = place(0, "rmA", "a1"), place(1, "rmB", "b1"), place(1, "rmA", "a1")


def holds_with(rms: ScriptedRMs, tokens: Tokens) -> RmHolds:
    return RmHolds(rms, tokens, "job", ["keep", "moved"], False, {"user": "u"})  # type: ignore[arg-type]


def test_a_refused_schedule_keeps_what_the_next_one_reuses():
    rms, tokens = ScriptedRMs({("rmB", "job.moved"): ["refuse"]}), Tokens()
    holds = holds_with(rms, tokens)
    first, second = Schedule(100.0, (KEEP, ON_B)), Schedule(100.0, (KEEP, ON_A))
    assert holds.confirm(first) is False
    assert holds.refusals[first] == [{"rm": "rmB", "label": "moved",
                                      "reason": "RuntimeError: busy"}]
    assert holds.confirm(second) is True
    assert rms.reserved == ["job.keep", "job.moved", "job.moved"]  # keep reserved once
    assert rms.released == []
    holds.release_except(second)
    assert rms.released == []
    parts = holds.parts(second)
    assert [(p.label, p.rm, p.name, p.token) for p in parts] == [
        ("keep", "rmA", "job.keep", "tok0"), ("moved", "rmA", "job.moved", "tok2")]
    described = holds.describe([])
    assert described == []


def test_a_placement_whose_token_changed_is_reserved_again():
    rms, tokens = ScriptedRMs({("rmB", "job.moved"): ["refuse"]}), Tokens()
    holds = holds_with(rms, tokens)
    assert holds.confirm(Schedule(100.0, (KEEP, ON_B))) is False
    tokens.ids[KEEP] = "fresh"  # the enactor started afresh after its tokens expired
    assert holds.confirm(Schedule(100.0, (KEEP, ON_A))) is True
    assert rms.released == [("rmA", "job.keep", "tok0")]
    assert rms.reserved == ["job.keep", "job.moved", "job.keep", "job.moved"]


def test_timed_out_reserves_are_released_like_made_ones():
    rms, tokens = ScriptedRMs({("rmB", "job.moved"): ["timeout"]}), Tokens()
    holds = holds_with(rms, tokens)
    assert holds.confirm(Schedule(100.0, (KEEP, ON_B))) is False
    assert holds.unsure  # the RM may still make it
    holds.release_all()
    assert sorted(rms.released) == [("rmA", "job.keep", "tok0"), ("rmB", "job.moved", "tok1")]
    assert not holds.made and not holds.unsure


def test_undo_releases_the_schedule_the_tokens_could_not_confirm():
    rms, tokens = ScriptedRMs({}), Tokens()
    holds = holds_with(rms, tokens)
    schedule = Schedule(100.0, (KEEP, ON_B))
    assert holds.confirm(schedule) is True
    holds.undo(schedule)
    assert sorted(rms.released) == [("rmA", "job.keep", "tok0"), ("rmB", "job.moved", "tok1")]
    assert part_name("job", "keep") == "job.keep"
