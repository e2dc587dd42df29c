"""The heartbeat thread's schedule: beats never wait on the first SQL record."""

from __future__ import annotations

import threading
import time

from grid_tasks.node.daemon import Heartbeat


class _Beats:
    """Records when the thread beats (the registry's only call from the loop)."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def heartbeat(self, rm: str, node: str, now: float, active: int = 0) -> bool:
        self.times.append(time.monotonic())
        return False


def test_a_slow_first_record_does_not_delay_the_beats():
    beats, release = _Beats(), threading.Event()
    hb = Heartbeat(beats, "rmA", "node1", 0.05, on_first=lambda: release.wait(5))
    started = time.monotonic()
    hb.start()
    try:
        time.sleep(0.3)
        # the first record is still blocked, and the node kept beating meanwhile
        assert len(beats.times) >= 3
        assert beats.times[0] - started < 0.2
    finally:
        release.set()
        hb.stop()


def test_beats_keep_a_fixed_schedule_when_one_is_slow():
    beats = _Beats()
    slow_once = [True]

    def beat(rm: str, node: str, now: float, active: int = 0) -> bool:
        beats.times.append(time.monotonic())
        if slow_once[0]:
            slow_once[0] = False
            time.sleep(0.08)  # a slow Redis round trip
        return False

    beats.heartbeat = beat  # type: ignore[method-assign]
    hb = Heartbeat(beats, "rmA", "node1", 0.1)
    hb.start()
    time.sleep(0.55)
    hb.stop()
    gaps = [b - a for a, b in zip(beats.times, beats.times[1:])]
    # the beat after the slow one starts on schedule (one interval after the slow one
    # started), not a full interval after it returned (0.18 s)
    assert gaps and gaps[0] < 0.14
    assert len(beats.times) >= 5
