"""The node daemon's watchdog process: it kills job process groups that are no longer
renewed, all of them when its daemon freezes, and all of them when its pipe closes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from grid_tasks.node.watchdog import Groups, Watchdog

BOUND = 1.0


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _until_dead(pids, timeout: float) -> float:
    began = time.monotonic()
    while any(_alive(p) for p in pids):
        assert time.monotonic() - began < timeout, f"still alive after {timeout} s: {pids}"
        time.sleep(0.02)
    return time.monotonic() - began


def _job(**env: str) -> subprocess.Popen:
    return subprocess.Popen(["sleep", "60"], start_new_session=True,
                            env={**os.environ, "GRID_TASKS_JOB_ID": "7", **env})


def test_groups_kill_what_is_not_renewed_within_the_bound() -> None:
    killed: list[int] = []
    groups = Groups(5.0, kill=killed.append)
    groups.apply("watch 100.0 11 12", now=100.0)
    groups.apply("renew 104.0 11", now=104.0)
    groups.apply("renew 104.0 99", now=104.0)  # never watched: ignored
    assert groups.expire(105.5) == [12] and killed == [12]
    assert groups.expire(108.0) == []  # 11 renewed at 104: good until 109
    groups.apply("forget 11", now=108.5)
    assert groups.expire(200.0) == [] and killed == [12]
    groups.apply("watch 100.0 13", now=200.0)  # claimed a bound ago: killed at once
    assert killed == [12, 13]


def test_groups_kill_every_job_of_a_daemon_whose_beats_lapse() -> None:
    killed: list[int] = []
    groups = Groups(5.0, kill=killed.append, unannounced=lambda: [21, 22])
    groups.apply("beat 100.0", now=100.0)
    groups.apply("watch 104.0 20", now=104.0)
    groups.apply("renew 104.5 20", now=104.5)
    assert groups.expire(104.9) == []
    groups.renewed[20] = 105.5  # a renewal does not stand for the daemon's beats
    assert groups.expire(105.6) == [20, 21, 22]  # the spawned-but-unannounced ones too
    assert groups.expire(120.0) == []  # acted on once; the next beat re-arms it


def test_a_group_no_longer_renewed_is_killed_after_the_bound() -> None:
    dog = Watchdog(BOUND).start()
    job = _job()
    try:
        dog.watch([job.pid], time.monotonic())
        for _ in range(15):  # 1.5 s of renewals: longer than the bound, alive
            time.sleep(0.1)
            dog.renew([job.pid], time.monotonic())
        assert _alive(job.pid)
        took = _until_dead([job.pid], BOUND + 2.0)
        assert took > BOUND * 0.8  # not before the bound
    finally:
        job.kill()
        job.wait()
        dog.close()


def test_closing_the_pipe_kills_every_watched_group_at_once() -> None:
    dog = Watchdog(30.0).start()
    jobs = [_job(), _job()]
    try:
        dog.watch([j.pid for j in jobs], time.monotonic())
        time.sleep(0.2)
        assert all(_alive(j.pid) for j in jobs)
        dog.close()  # what a daemon's death does to the pipe
        assert _until_dead([j.pid for j in jobs], 2.0) < 2.0
        assert dog.proc is None
    finally:
        for j in jobs:
            j.kill()
            j.wait()


_DAEMON = textwrap.dedent("""
    import os, subprocess, sys, time
    from grid_tasks.node.watchdog import Watchdog
    dog = Watchdog(float(sys.argv[1])).start()
    env = {**os.environ, "GRID_TASKS_JOB_ID": "7"}
    told = subprocess.Popen(["sleep", "60"], start_new_session=True, env=env)
    dog.watch([told.pid], time.monotonic())
    # frozen between spawn and watch: the watchdog never heard of this one
    untold = subprocess.Popen(["sleep", "60"], start_new_session=True, env=env)
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)  # not a job
    print(told.pid, untold.pid, other.pid, dog.proc.pid, flush=True)
    while True:  # its job manager renews its lease
        dog.renew([told.pid], time.monotonic())
        time.sleep(0.1)
""")


def test_a_frozen_daemon_has_all_its_jobs_killed_even_unannounced_ones() -> None:
    """The SIGSTOPped daemon runs no thread: only the watchdog can end its jobs."""
    daemon = subprocess.Popen([sys.executable, "-c", _DAEMON, repr(BOUND)],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    told, untold, other, dog = map(int, daemon.stdout.readline().split())
    try:
        time.sleep(BOUND * 1.5)  # beating: nothing is killed
        assert _alive(told) and _alive(untold)
        os.kill(daemon.pid, signal.SIGSTOP)
        _until_dead([told, untold], BOUND + 2.0)
        assert _alive(other) and _alive(dog)  # not a job; the watchdog lives on
    finally:
        os.kill(daemon.pid, signal.SIGCONT)
        os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait()
        for pid in (told, untold, other):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    _until_dead([dog], 3.0)  # its pipe closed with the daemon: it exits


def test_a_group_id_that_no_longer_leads_a_job_is_not_killed() -> None:
    """A lost ``forget`` and a reused id: the watchdog kills only grid jobs' groups."""
    dog = Watchdog(BOUND).start()
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True,
                                env={k: v for k, v in os.environ.items()
                                     if k != "GRID_TASKS_JOB_ID"})
    job = _job()
    try:
        long_ago = time.monotonic() - 10 * BOUND  # due at once
        dog.watch([stranger.pid, job.pid], long_ago)
        _until_dead([job.pid], 2.0)
        assert _alive(stranger.pid)
    finally:
        for proc in (stranger, job):
            proc.kill()
            proc.wait()
        dog.close()


def test_a_rest_stops_the_lapse_check_until_the_next_beat() -> None:
    killed: list[int] = []
    groups = Groups(5.0, kill=killed.append, unannounced=lambda: [21])
    groups.apply("beat 100.0", now=100.0)
    groups.apply("rest 101.0", now=101.0)  # idle: no launch spawning, nothing watched
    assert groups.expire(150.0) == [] and killed == []
    groups.apply("beat 160.0", now=160.0)  # a launch armed: timed again
    assert groups.expire(166.0) == [21]


def _switches(pid: int, tid: int | None = None) -> int:
    path = f"/proc/{pid}/task/{tid}/status" if tid else f"/proc/{pid}/status"
    with open(path) as f:
        return next(int(line.split()[1]) for line in f
                    if line.startswith("voluntary_ctxt_switches"))


def test_an_idle_daemon_and_its_watchdog_sleep_until_a_launch_arms_them() -> None:
    """Idle, neither the beat thread nor the watchdog wakes (they did 2 and 4 times a
    second: issue 25); an armed launch has them beat and tick again."""
    dog = Watchdog(BOUND).start()
    try:
        time.sleep(1.0)  # the first round: the daemon says it rests
        beats = dog._beats.native_id  # noqa - the beat thread, to count its wake-ups
        before = _switches(dog.proc.pid), _switches(os.getpid(), beats)
        time.sleep(1.0)
        after = _switches(dog.proc.pid), _switches(os.getpid(), beats)
        assert after[0] - before[0] <= 1 and after[1] - before[1] <= 1, (before, after)
        dog.arm()
        time.sleep(1.0)
        armed = _switches(dog.proc.pid), _switches(os.getpid(), beats)
        assert armed[0] - after[0] >= 3 and armed[1] - after[1] >= 3, (after, armed)
        dog.disarm()
    finally:
        dog.close()


_ARMED = textwrap.dedent("""
    import os, subprocess, sys, time
    from grid_tasks.node.watchdog import Watchdog
    dog = Watchdog(float(sys.argv[1])).start()
    time.sleep(0.5)  # idle: resting, no beats
    dog.arm()  # a launch begins
    env = {**os.environ, "GRID_TASKS_JOB_ID": "7"}
    untold = subprocess.Popen(["sleep", "60"], start_new_session=True, env=env)
    print(untold.pid, dog.proc.pid, flush=True)
    while True:  # frozen before its watch (SIGSTOP below)
        time.sleep(0.1)
""")


def test_a_daemon_frozen_between_an_armed_spawn_and_its_watch_loses_the_job() -> None:
    """An idle daemon's watchdog rests; a launch arms it before spawning, so a freeze
    right after the spawn is still caught."""
    daemon = subprocess.Popen([sys.executable, "-c", _ARMED, repr(BOUND)],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    untold, dog = map(int, daemon.stdout.readline().split())
    try:
        time.sleep(BOUND * 1.5)  # beating while armed: nothing is killed
        assert _alive(untold)
        os.kill(daemon.pid, signal.SIGSTOP)
        _until_dead([untold], BOUND + 2.0)
    finally:
        os.kill(daemon.pid, signal.SIGCONT)
        os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait()
        try:
            os.killpg(untold, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _until_dead([dog], 3.0)
