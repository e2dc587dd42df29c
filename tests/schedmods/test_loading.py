"""Modules named in maui.cfg: built explicitly (load_modules) or by the core (use_context)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

from grid_tasks.maui import Node, Observers, Scheduler
from grid_tasks.maui.cfg import parse_maui_config
from grid_tasks.maui.cfgbridge import scheduler_config
from grid_tasks.maui.model import SchedulerError
from grid_tasks.maui.modules import Statistics
from grid_tasks.schedmods import (
    JobChecker,
    LoggerModule,
    ModuleContext,
    SystemProfiler,
    context as context_module,
    current_context,
    load_modules,
    scheduler_parts,
    set_default_context,
    use_context,
)

CFG = "MODULES logger, jobchecker profiler statistics\nLOGFILEMAXSIZE 4096\nDEFERCOUNT 3\n"


def make_context(tmp_path: Path, sessions) -> ModuleContext:
    return ModuleContext(state_dir=tmp_path, rm="rmA", sessions=sessions,
                         loggers=("test.loading",), clock=lambda: 1.0)


def test_load_modules_builds_the_listed_modules_in_order(tmp_path: Path, sessions) -> None:
    cfg = parse_maui_config(CFG)
    modules = load_modules(cfg, make_context(tmp_path, sessions))
    assert [type(m) for m in modules] == [LoggerModule, JobChecker, SystemProfiler, Statistics]
    logger, checker = modules[0], modules[1]
    assert logger.max_bytes == 4096 and logger.path == tmp_path / "log" / "maui.log"
    assert checker.policy.defer_count == 3 and checker.context.config is cfg
    with pytest.raises(SchedulerError, match="unknown scheduler module 'nosuch'"):
        load_modules(parse_maui_config("MODULES logger nosuch\n"), make_context(tmp_path, sessions))


def test_scheduler_parts_builds_each_module_once(tmp_path: Path, sessions) -> None:
    config, modules = scheduler_parts(parse_maui_config(CFG), make_context(tmp_path, sessions))
    assert config.modules == ()
    sched, observers = Scheduler([Node("n1", 2)], config), Observers(modules)
    observers.started(sched)
    assert [type(m).__name__ for m in observers] == [
        "LoggerModule", "JobChecker", "SystemProfiler", "Statistics"]
    observers.iterate(sched, 5.0)
    assert modules[1].last is not None and modules[3].iterations == 1
    observers.shutdown(sched)


def test_observers_build_them_by_name_inside_use_context(tmp_path: Path, sessions) -> None:
    cfg = parse_maui_config(CFG)
    ctx = dataclasses.replace(make_context(tmp_path, sessions), config=cfg)
    config = scheduler_config(cfg)
    with use_context(ctx):
        observers = Observers(config.modules)
    sched = Scheduler([Node("n1", 2)], config)
    observers.started(sched)
    mods = list(observers)
    assert [type(m) for m in mods][:3] == [LoggerModule, JobChecker, SystemProfiler]
    assert all(m.context is ctx for m in mods[:3])
    assert mods[0].max_bytes == 4096  # read from the context's maui.cfg
    observers.iterate(sched, 2.0)
    logging.getLogger("test.loading").warning("seen by the logger module")
    observers.shutdown(sched)
    assert "seen by the logger module" in (tmp_path / "log" / "maui.log").read_text()


def test_default_context_and_the_environment_fallback(tmp_path: Path, settings, monkeypatch) -> None:
    saved = context_module._default
    try:
        ctx = ModuleContext(state_dir=tmp_path)
        set_default_context(ctx)
        assert current_context() is ctx
        set_default_context(None)
        for key, value in settings.to_env().items():
            monkeypatch.setenv(key, value)
        from_env = current_context()
        assert Path(from_env.state_dir) == Path(settings.state_dir)
        assert from_env.redis.ping() is True and from_env.sessions is not None
        inner = ModuleContext(state_dir=tmp_path / "inner")
        with use_context(inner):
            assert current_context() is inner
        assert current_context() is from_env
        from_env.redis.close()
    finally:
        set_default_context(saved)
