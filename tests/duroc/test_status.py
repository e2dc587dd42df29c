"""A coallocated job's snapshot on the wire: the notes an action adds (subjob cancels
still under way) travel with it and are shown by ``grid-tasks coalloc``."""

from __future__ import annotations

import json

from grid_tasks.cli.coalloc import _show
from grid_tasks.duroc.status import CoallocStatus, SubjobStatus
from grid_tasks.states import JobState, SubjobCommsType, SubjobStartType

NOTE = ("GRAM job 7 on slurm1: cancel requested; the RM's gatekeeper is unreachable, it "
        "will be retried until the gatekeeper answers")


def snapshot(notes: tuple[str, ...] = ()) -> CoallocStatus:
    sub = SubjobStatus("late", 1, "slurm1", SubjobStartType.STRICT_BARRIER,
                       SubjobCommsType.BLOCKING_JOIN, 1, JobState.ACTIVE, gram_job=7)
    return CoallocStatus(3, "duroc://coalloc/3", JobState.FAILED, "cancelled",
                         "cancelled by user", (sub,), notes)


def test_notes_round_trip_and_are_absent_when_none():
    noted = snapshot((NOTE,))
    assert CoallocStatus.from_dict(json.loads(json.dumps(noted.to_dict()))) == noted
    assert "notes" not in snapshot().to_dict()  # a plain snapshot reads as before
    assert CoallocStatus.from_dict(snapshot().to_dict()).notes == ()


def test_the_cli_shows_the_notes_after_the_table_and_in_json(capsys):
    _show(snapshot((NOTE,)), as_json=False)
    shown = capsys.readouterr().out
    assert shown.rstrip().endswith(NOTE) and "late" in shown
    _show(snapshot((NOTE,)), as_json=True)
    assert json.loads(capsys.readouterr().out)["notes"] == [NOTE]
