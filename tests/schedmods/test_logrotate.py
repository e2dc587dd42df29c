"""The logger module: size-based rolls into gzipped generations, nothing lost."""

from __future__ import annotations

import gzip
import logging
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from grid_tasks.errors import ConfigError
from grid_tasks.maui import Job, Node, Observers, Scheduler, SchedulerConfig
from grid_tasks.maui.cfg import parse_maui_config
from grid_tasks.schedmods import LoggerModule, ModuleContext, RotatingLog, load_modules


def all_lines(rot: RotatingLog) -> list[str]:
    """Every line kept: oldest generation first, then the live file."""
    lines: list[str] = []
    n = 1
    while rot.generation(n).exists():
        n += 1
    for k in range(n - 1, 0, -1):
        lines += gzip.decompress(rot.generation(k).read_bytes()).decode().splitlines()
    if rot.path.exists():
        lines += rot.path.read_text().splitlines()
    return lines


def test_rolls_by_size_into_gzipped_generations(tmp_path: Path) -> None:
    rot = RotatingLog(tmp_path / "log" / "maui.log", max_bytes=100, depth=3)
    for i in range(40):
        rot.write(f"line {i:03d}\n")  # 9 bytes each
    assert rot.rolls == 3
    assert rot.path.stat().st_size < 100
    gens = sorted(p.name for p in rot.path.parent.glob("maui.log.*.gz"))
    assert gens == ["maui.log.1.gz", "maui.log.2.gz", "maui.log.3.gz"]
    newest = gzip.decompress(rot.generation(1).read_bytes()).decode().splitlines()
    # every 12th 9-byte line reaches 100 bytes: rolls after lines 11, 23 and 35
    assert newest == [f"line {i:03d}" for i in range(24, 36)]
    assert all_lines(rot) == [f"line {i:03d}" for i in range(40)]


def test_depth_drops_the_oldest_and_zero_keeps_nothing(tmp_path: Path) -> None:
    rot = RotatingLog(tmp_path / "a.log", max_bytes=50, depth=2)
    for i in range(100):
        rot.write(f"{i:04d}\n")
    assert not rot.generation(3).exists() and rot.generation(2).exists()
    kept = all_lines(rot)
    assert kept == [f"{i:04d}" for i in range(100 - len(kept), 100)]  # a contiguous tail
    none = RotatingLog(tmp_path / "b.log", max_bytes=50, depth=0)
    for i in range(30):
        none.write(f"{i:04d}\n")
    assert none.rolls == 3 and not list(tmp_path.glob("b.log.*.gz"))


def test_no_line_lost_with_threads_processes_and_rolls(tmp_path: Path) -> None:
    path = tmp_path / "sched.log"
    rot = RotatingLog(path, max_bytes=8192, depth=10_000)
    child = ("import sys\nfrom grid_tasks.schedmods import RotatingLog\n"
             "r = RotatingLog(sys.argv[1], 8192, 10000)\n"
             "for i in range(2000): r.write(f'proc {sys.argv[2]} {i}\\n')\n")
    procs = [subprocess.Popen([sys.executable, "-c", child, str(path), str(p)])
             for p in range(2)]

    def writer(t: int) -> None:
        for i in range(2000):
            rot.write(f"thread {t} {i}\n")

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    stop = threading.Event()

    def roller() -> None:
        while not stop.wait(0.001):
            rot.roll_if_needed()

    extra = threading.Thread(target=roller)
    for th in [*threads, extra]:
        th.start()
    for th in threads:
        th.join()
    stop.set()
    extra.join()
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    lines = all_lines(rot)
    expected = {f"thread {t} {i}" for t in range(4) for i in range(2000)}
    expected |= {f"proc {p} {i}" for p in range(2) for i in range(2000)}
    assert len(lines) == len(expected) and set(lines) == expected
    assert rot.rolls > 5
    assert not path.with_name("sched.log.rolling").exists()


def test_an_interrupted_roll_is_finished_by_the_next(tmp_path: Path) -> None:
    rot = RotatingLog(tmp_path / "m.log", max_bytes=10, depth=5)
    rot.path.with_name("m.log.rolling").write_text("before crash\n")
    rot.write("after restart\n")  # 14 bytes: rolls, finishing the leftover first
    assert gzip.decompress(rot.generation(2).read_bytes()) == b"before crash\n"
    assert gzip.decompress(rot.generation(1).read_bytes()) == b"after restart\n"


def test_unwritable_log_dir_is_a_config_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError, match="cannot open scheduler log"):
        RotatingLog(blocker / "maui.log", 100, 1)
    with pytest.raises(ConfigError):
        RotatingLog(tmp_path / "x.log", -1, 1)


def test_logger_module_writes_and_rolls_the_scheduler_log(tmp_path: Path) -> None:
    cfg = parse_maui_config("MODULES logger\nLOGDIR logs/\nLOGFILE sched.log\n"
                            "LOGFILEMAXSIZE 300\nLOGFILEROLLDEPTH 2\nLOGLEVEL 1\n")
    ctx = ModuleContext(state_dir=tmp_path, rm="rmA", loggers=("grid_tasks", "test.sched"))
    modules = load_modules(cfg, ctx)
    assert [type(m) for m in modules] == [LoggerModule]
    sched, observers = Scheduler([Node("n1", 4)], SchedulerConfig()), Observers(modules)
    observers.started(sched)
    for t in range(10):
        sched.submit(Job(id=f"j{t}", tasks=1, walltime=100.0), now=float(t))
        observers.iterate(sched, float(t))
    logging.getLogger("test.sched").warning("operator note")
    log = tmp_path / "logs" / "sched.log"
    text = log.read_text() + "".join(
        gzip.decompress(p.read_bytes()).decode() for p in sorted(log.parent.glob("*.gz")))
    assert "iteration at 9 on rmA: started 0" in text and "operator note" in text
    assert "iteration at 0 on rmA" not in text  # rolled past LOGFILEROLLDEPTH
    assert (log.parent / "sched.log.1.gz").exists() and not (log.parent / "sched.log.3.gz").exists()
    observers.shutdown(sched)
    before = log.read_text()
    logging.getLogger("test.sched").warning("after shutdown")
    assert log.read_text() == before  # detached


def test_logger_level_zero_keeps_information_out(tmp_path: Path) -> None:
    cfg = parse_maui_config(f"LOGDIR {tmp_path}\nLOGLEVEL 0\n")
    mod = LoggerModule(cfg, ModuleContext(state_dir=tmp_path / "unused", loggers=("test.quiet",)))
    sched, observers = Scheduler([Node("n1", 1)]), Observers([mod])
    observers.started(sched)
    logging.getLogger("test.quiet").info("chatter")
    logging.getLogger("test.quiet").error("trouble")
    observers.shutdown(sched)
    text = (tmp_path / "maui.log").read_text()
    assert "trouble" in text and "chatter" not in text


def test_writing_after_close_reopens(tmp_path: Path) -> None:
    rot = RotatingLog(tmp_path / "c.log", max_bytes=0, depth=1)
    rot.write("one\n")
    rot.close()
    rot.write("two\n")
    rot.close()
    assert rot.path.read_text() == "one\ntwo\n" and rot.rolls == 0


def test_a_failed_reopen_never_closes_a_descriptor_twice(tmp_path):
    # The log's directory vanishes: the stale fd is closed and the reopen fails.  The
    # closed number must be forgotten, or close() would close whoever got it next.
    logdir = tmp_path / "logs"
    rlog = RotatingLog(logdir / "maui.log", 0, 0)
    rlog.write("one\n")
    shutil.rmtree(logdir)
    with pytest.raises(FileNotFoundError):
        rlog.write("two\n")
    other = os.open(tmp_path / "someone-else", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        rlog.close()
        os.fstat(other)  # still open
    finally:
        os.close(other)
