"""The supervisor leaves no process behind: grandchildren, TERM-ignorers, dead parents."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import psutil
import pytest

from grid_tasks.embedded.supervisor import ChildFailed, Supervisor, death_signal_prefix, leftover

# A process with a grandchild, both sleeping.
FAMILY = ("import subprocess, sys, time; "
          "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
          "time.sleep(60)")
# A process that ignores SIGTERM.
STUBBORN = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(60)")


def _wait_for(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_stop_all_kills_children_and_grandchildren(tmp_path):
    sup = Supervisor(tmp_path)
    a = sup.spawn("a", [sys.executable, "-c", FAMILY])
    sup.spawn("b", [sys.executable, "-c", FAMILY])
    _wait_for(lambda: len(psutil.Process(a.pid).children()) == 1)
    pids = sup.all_pids()
    assert len(pids) >= 3
    sup.stop_all(timeout=5)
    assert leftover(pids) == []


def test_term_ignoring_child_is_killed_after_timeout(tmp_path):
    with Supervisor(tmp_path) as sup:
        child = sup.spawn("stubborn", [sys.executable, "-c", STUBBORN])
        _wait_for(lambda: "ready" in child.log_tail())
        started = time.monotonic()
        sup.stop(child, timeout=0.5)
        assert time.monotonic() - started < 3
        assert child.process.returncode == -signal.SIGKILL


def test_check_reports_a_dead_child_with_its_log(tmp_path):
    with Supervisor(tmp_path) as sup:
        sup.spawn("crash", [sys.executable, "-c", "print('boom happened'); raise SystemExit(3)"])
        _wait_for(lambda: not sup.children[0].alive())
        with pytest.raises(ChildFailed, match="crash exited with code 3: boom happened"):
            sup.check()


@pytest.mark.parametrize("way", ["setpriv", "preexec_fn"])
def test_children_die_with_a_killed_supervisor(tmp_path, way):
    # The supervisor itself runs in a subprocess that we SIGKILL: no cleanup code runs.
    # Both ways of setting the death signal: setpriv's (vfork) and the fallback's.
    if way == "setpriv" and not death_signal_prefix():
        pytest.skip("util-linux setpriv with --pdeathsig is not installed")
    script = (
        "import sys, time; from pathlib import Path;"
        "from grid_tasks.embedded import supervisor; from grid_tasks.embedded.supervisor "
        "import Supervisor;"
        + ("supervisor.death_signal_prefix = lambda: ();" if way == "preexec_fn" else "") +
        f"s = Supervisor(Path({str(tmp_path)!r}));"
        "c = s.spawn('sleeper', [sys.executable, '-c', 'import time; time.sleep(60)']);"
        "print(c.pid, flush=True); time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        child_pid = int(parent.stdout.readline())
        assert psutil.pid_exists(child_pid)
        parent.kill()
        parent.wait()
        _wait_for(lambda: leftover({child_pid}) == [])
    finally:
        parent.kill()
        parent.wait()


SLEEPER = "import time; print('up', flush=True); time.sleep(60)"


def test_a_killed_child_is_restarted_with_backoff(tmp_path):
    with Supervisor(tmp_path, backoff=0.3, startup=0.2) as sup:
        child = sup.spawn("sched", [sys.executable, "-c", SLEEPER])
        _wait_for(lambda: "up" in child.log_tail())
        time.sleep(0.25)  # past its startup window: it came up properly
        first = child.pid
        child.process.kill()
        child.process.wait()
        killed = time.monotonic()
        assert sup.check() == []  # backoff: not at once
        _wait_for(lambda: sup.check() == ["sched"])
        assert time.monotonic() - killed >= 0.3
        assert child.pid != first and child.alive() and child.restarts == 1
        _wait_for(lambda: child.log_tail().count("up") == 2)


def test_a_child_that_keeps_dying_fails_after_the_restart_limit(tmp_path):
    crash = "import time; time.sleep(0.15); print('dying', flush=True); raise SystemExit(4)"
    with Supervisor(tmp_path, max_restarts=2, backoff=0.01, startup=0.1) as sup:
        child = sup.spawn("flaky", [sys.executable, "-c", crash])
        restarted: list[str] = []

        def failed() -> bool:
            try:
                restarted.extend(sup.check())
            except ChildFailed as exc:
                assert "flaky exited with code 4 (after 2 restarts): dying" in str(exc)
                return True
            return False

        _wait_for(failed, timeout=10)
        assert restarted == ["flaky", "flaky"] and child.restarts == 2


def test_a_stopped_child_is_not_restarted(tmp_path):
    with Supervisor(tmp_path, backoff=0.0, startup=0.0) as sup:
        child = sup.spawn("one", [sys.executable, "-c", SLEEPER])
        sup.stop(child, timeout=2)
        time.sleep(0.05)
        assert sup.check() == [] and not child.alive()
