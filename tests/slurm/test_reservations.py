"""A grid reservation's shape on Slurm (pure): its unique name, its window over the whole
walltime, FLEX for an early start, and the names ``scontrol -o`` lists."""

from __future__ import annotations

from grid_tasks.slurm.reservations import flags, listed_names, rm_prefix, slurm_name, window


def test_names_are_unique_per_rm_and_safe_for_slurm():
    assert slurm_name("rmS", "co-1a2b.part0") == "gt-rmS-co-1a2b.part0"
    assert slurm_name("rmS", "a b;c") == "gt-rmS-a_b_c"
    assert slurm_name("rmS", "x") != slurm_name("rmT", "x")
    assert slurm_name("rmS", "x").startswith(rm_prefix("rmS"))


def test_window_covers_the_whole_interval_from_now_at_the_earliest():
    ahead = window(100.0, 160.0, 50.0)
    assert (ahead.start, ahead.seconds) == (100, 60)
    late = window(100.0, 160.0, 130.5)  # asked after its start: from now, still to the end
    assert (late.start, late.seconds) == (130, 30)
    frac = window(100.4, 160.0, 0.0)  # a cut fraction is kept: the window reaches the end
    assert frac.start == 100 and frac.start + frac.seconds >= 160.0


def test_early_start_is_flex_and_nothing_else():
    assert flags(True) == ("FLEX",) and flags(False) == ()


def test_listed_names_read_scontrol_one_liners():
    text = ("ReservationName=gt-rmS-a StartTime=2026-11-26T20:34:56 Users=root\n"
            "ReservationName=maint StartTime=2026-11-27T00:00:00 Users=root\n")
    assert listed_names(text) == ["gt-rmS-a", "maint"]
    assert listed_names("No reservations in the system\n") == []
