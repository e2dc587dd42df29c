"""The logger module (seed 004, 3.4): the scheduler log with size-based rotation and gzip.

``LOGDIR``/``LOGFILE`` name the file, ``LOGFILEMAXSIZE`` the size (bytes) at which it
rolls, ``LOGFILEROLLDEPTH`` how many compressed rolls are kept: ``maui.log`` becomes
``maui.log.1.gz``, the older ones shift to ``.2.gz`` ... and the oldest beyond the depth
is dropped.  ``LOGLEVEL`` 0 logs warnings, 1-2 information, 3 and above debug.

No line is lost while rolling, even with several processes writing the same file: a
write and a roll hold the same lock (a thread lock plus ``flock`` on ``<file>.lock``),
and a writer reopens the path whenever another process has rolled it away.
"""

from __future__ import annotations

import fcntl
import gzip
import logging
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from grid_tasks.errors import ConfigError
from grid_tasks.maui.model import IterationResult
from grid_tasks.maui.modules import SchedModule, register_module
from grid_tasks.private_files import FILE_MODE, missing_dirs_private, open_private
from grid_tasks.schedmods.context import ModuleContext, current_context

if TYPE_CHECKING:  # pragma: no cover
    from grid_tasks.maui.cfg import MauiConfig
    from grid_tasks.maui.scheduler import Scheduler

log = logging.getLogger(__name__)


class RotatingLog:
    """An append-only text file that rolls into gzipped generations past ``max_bytes``.

    ``max_bytes`` 0 never rolls; ``depth`` 0 discards the rolled content.  Safe for
    many threads and processes writing at once.
    """

    def __init__(self, path: str | os.PathLike[str], max_bytes: int, depth: int) -> None:
        if max_bytes < 0 or depth < 0:
            raise ConfigError(f"log {path}: size {max_bytes} and depth {depth} must be >= 0",
                              key="LOGFILEMAXSIZE" if max_bytes < 0 else "LOGFILEROLLDEPTH")
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.depth = depth
        self.rolls = 0  # rolls done by this object
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._lock_fd: int | None = None
        try:
            missing_dirs_private(self.path.parent)
            self._open_lock()
        except OSError as exc:
            raise ConfigError(f"cannot open scheduler log {self.path}: {exc.strerror}",
                              source=str(self.path)) from None

    def _open_lock(self) -> int:
        if self._lock_fd is None:
            self._lock_fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT, FILE_MODE)
        return self._lock_fd

    def generation(self, n: int) -> Path:
        """Path of rolled generation ``n`` (1 = newest)."""
        return self.path.with_name(f"{self.path.name}.{n}.gz")

    def write(self, text: str) -> None:
        """Append ``text`` (a whole line, newline included) and roll if it got too big."""
        data = text.encode("utf-8", "backslashreplace")
        with self._locked():
            fd = self._current_fd()
            os.write(fd, data)
            if self.max_bytes and os.fstat(fd).st_size >= self.max_bytes:
                self._roll_locked()

    def roll_if_needed(self) -> bool:
        """Roll when the file reached ``max_bytes`` (another process may have filled it)."""
        if not self.max_bytes:
            return False
        with self._locked():
            try:
                size = self.path.stat().st_size
            except FileNotFoundError:
                return False
            if size < self.max_bytes:
                return False
            self._roll_locked()
            return True

    def close(self) -> None:
        """Close the file descriptors (writing again reopens them)."""
        with self._lock:
            fds, self._fd, self._lock_fd = (self._fd, self._lock_fd), None, None
            for fd in fds:  # forgotten first: a number closed twice may be another's by then
                if fd is not None:
                    os.close(fd)

    # -- internals -----------------------------------------------------------------
    def _locked(self) -> "_Both":
        return _Both(self._lock, self._open_lock)

    def _current_fd(self) -> int:
        # Another process may have rolled the file since we opened it: write where the
        # path points now, never into a generation about to be compressed.
        if self._fd is not None:
            try:
                same = os.stat(self.path).st_ino == os.fstat(self._fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return self._fd
            stale, self._fd = self._fd, None  # forgotten before the reopen, which may fail
            os.close(stale)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
        return self._fd

    def _roll_locked(self) -> None:
        leftover = self.path.with_name(f"{self.path.name}.rolling")
        if leftover.exists():  # a roll interrupted by a crash: finish it first
            self._store(leftover)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        os.replace(self.path, leftover)
        self._store(leftover)
        self.rolls += 1

    def _store(self, src: Path) -> None:
        """Shift the generations up and compress ``src`` into generation 1."""
        if self.depth == 0:
            src.unlink()
            return
        self.generation(self.depth).unlink(missing_ok=True)
        for n in range(self.depth - 1, 0, -1):
            if self.generation(n).exists():
                os.replace(self.generation(n), self.generation(n + 1))
        tmp = self.path.with_name(f"{self.path.name}.1.gz.tmp")
        with open(src, "rb") as fin, open_private(tmp, "wb") as raw, \
                gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6) as fout:
            shutil.copyfileobj(fin, fout)
        os.replace(tmp, self.generation(1))
        src.unlink()


class _Both:
    """Thread lock, then the cross-process ``flock``."""

    def __init__(self, lock: threading.Lock, lock_fd: Callable[[], int]) -> None:
        self.lock, self.lock_fd, self.fd = lock, lock_fd, -1

    def __enter__(self) -> None:
        self.lock.acquire()
        try:
            self.fd = self.lock_fd()  # opened under the thread lock: close() may have run
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except BaseException:
            self.lock.release()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        finally:
            self.lock.release()


class RotatingLogHandler(logging.Handler):
    """A logging handler writing one line per record into a :class:`RotatingLog`."""

    def __init__(self, rotating: RotatingLog, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        self.rotating = rotating
        self.setFormatter(logging.Formatter(
            "%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.rotating.write(self.format(record).replace("\n", "\n  ") + "\n")
        except Exception:  # logging must never take the scheduler down
            self.handleError(record)

    def close(self) -> None:
        self.rotating.close()
        super().close()


def log_level(maui_level: int) -> int:
    """The :mod:`logging` level for Maui's LOGLEVEL 0..9."""
    if maui_level <= 0:
        return logging.WARNING
    return logging.INFO if maui_level <= 2 else logging.DEBUG


def log_path(cfg: "MauiConfig", context: ModuleContext) -> Path:
    """Where LOGDIR/LOGFILE point: absolute as given, relative ones under the state dir."""
    log_dir = context.log_dir or Path(cfg.get("LOGDIR"))
    if not log_dir.is_absolute():
        log_dir = Path(context.state_dir) / log_dir
    return log_dir / cfg.get("LOGFILE")


# One handler per file per process: the live iteration builds a scheduler (and its
# modules) every time, and each must not add another copy of every line.
_installed: dict[Path, tuple[RotatingLogHandler, tuple[str, ...], dict[str, int]]] = {}
_installed_lock = threading.Lock()


def _attach(path: Path, max_bytes: int, depth: int, level: int,
            loggers: tuple[str, ...]) -> RotatingLogHandler:
    with _installed_lock:
        found = _installed.get(path)
        if found is not None:
            handler = found[0]
            handler.rotating.max_bytes, handler.rotating.depth = max_bytes, depth
            handler.setLevel(level)
            return handler
        handler = RotatingLogHandler(RotatingLog(path, max_bytes, depth), level)
        saved: dict[str, int] = {}
        for name in loggers:
            logger = logging.getLogger(name)
            if logger.getEffectiveLevel() > level:  # else records never reach the handler
                saved[name] = logger.level
                logger.setLevel(level)
            logger.addHandler(handler)
        _installed[path] = (handler, loggers, saved)
        return handler


def _detach(path: Path) -> None:
    with _installed_lock:
        found = _installed.pop(path, None)
    if found is None:
        return
    handler, loggers, saved = found
    for name in loggers:
        logger = logging.getLogger(name)
        logger.removeHandler(handler)
        if name in saved:
            logger.setLevel(saved[name])
    handler.close()


@register_module("logger")
class LoggerModule(SchedModule):
    """Writes the scheduler log (loggers ``context.loggers``) and rolls it by size."""

    def __init__(self, cfg: "MauiConfig | None" = None,
                 context: ModuleContext | None = None) -> None:
        self.context = context or current_context()
        cfg = cfg or self.context.maui_config()
        self.path = log_path(cfg, self.context)
        self.max_bytes = int(cfg.get("LOGFILEMAXSIZE"))
        self.depth = int(cfg.get("LOGFILEROLLDEPTH"))
        self.level = log_level(int(cfg.get("LOGLEVEL")))
        self.handler: RotatingLogHandler | None = None

    def on_start(self, scheduler: "Scheduler") -> None:
        self.handler = _attach(self.path, self.max_bytes, self.depth, self.level,
                               self.context.loggers)

    def on_iteration(self, scheduler: "Scheduler", result: IterationResult) -> None:
        log.info("iteration at %.0f%s: started %d (%d backfilled), reservations +%d -%d, "
                 "considered %d, throttled %d", result.now,
                 f" on {self.context.rm}" if self.context.rm else "", len(result.started),
                 result.backfilled, len(result.reservations_created),
                 len(result.reservations_released), result.considered, result.throttled)
        if self.handler is not None:
            try:
                self.handler.rotating.roll_if_needed()
            except OSError as exc:  # a full disk must not stop scheduling
                log.error("cannot roll scheduler log %s: %s", self.path, exc)

    def on_shutdown(self, scheduler: "Scheduler") -> None:
        _detach(self.path)
        self.handler = None
