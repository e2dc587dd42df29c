"""Typed errors of the DUROC coordination store and the job runtime library."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from grid_tasks.duroc.resp import (
    RespAuthenticationError, RespConnectionError, RespNoPermissionError, RespResponseError,
)
from grid_tasks.errors import ConfigError, ConnectivityError, GridTasksError, NotFoundError


class CoordinationError(GridTasksError):
    """Root of the coordination-store errors (barrier, structure, messaging)."""

    def __init__(self, message: str, *, job: str | None = None) -> None:
        self.job = job
        super().__init__(message if job is None else f"coallocated job {job!r}: {message}")

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "job": self.job}


class JobNotFoundError(CoordinationError, NotFoundError):
    """The coallocated job has no coordination state (never created, purged or expired)."""


class SubjobNotFoundError(CoordinationError, NotFoundError):
    """No subjob with that address or label in the job (never added, or deleted)."""


class JobExistsError(CoordinationError):
    """A job with that id already has coordination state."""


class StructureFrozenError(CoordinationError):
    """Subjobs can be added or deleted only until the barrier is released or aborted."""


class BarrierAbortedError(CoordinationError):
    """The job was cancelled or failed: processes must not run past the barrier."""

    def __init__(self, message: str, *, job: str | None = None, reason: str = "") -> None:
        self.reason = reason
        super().__init__(message, job=job)


class BarrierNotReadyError(CoordinationError):
    """Release was asked to require every barrier subjob complete, and some are not."""


class CoordinationTimeoutError(CoordinationError):
    """A bounded wait ended before its event (barrier, entries, group join, receive)."""


class BarrierTimeoutError(CoordinationTimeoutError):
    """The barrier was not released (or the entries not complete) in time."""


class ReceiveTimeoutError(CoordinationTimeoutError):
    """No message with the awaited tag arrived in time."""


class RuntimeMisuseError(CoordinationError):
    """A runtime call made where DUROC forbids it (bad rank, bad tag, not rank 0...)."""


class NotRankZeroError(RuntimeMisuseError):
    """Inter-subjob calls are reserved to the process of rank 0 of each subjob."""


class NotInGroupError(RuntimeMisuseError):
    """The subjob is ``independent``: it did not join the inter-subjob group."""


class RuntimeEnvironmentError(ConfigError):
    """A ``GRID_TASKS_*`` runtime variable is missing or malformed."""

    def __init__(self, variable: str, why: str) -> None:
        super().__init__(why, source="environment", key=variable)


class StoreUnavailableError(ConnectivityError):
    """The coordination Redis is unreachable or refused the credentials."""


class AccessDeniedError(CoordinationError):
    """The credentials in use do not allow that key or command (another job's keys)."""


def _error_for(code: str, detail: str, job: str) -> CoordinationError:
    """The typed error for a script's coded error reply."""
    if code == "NOJOB":
        return JobNotFoundError("no coordination state (never created, purged or expired)",
                                job=job)
    if code == "NOSUBJOB":
        return SubjobNotFoundError(f"no subjob {detail!r}", job=job)
    if code == "EXISTS":
        return JobExistsError("already created", job=job)
    if code == "DUPLABEL":
        return RuntimeMisuseError(f"duplicate subjob label {detail!r}", job=job)
    if code == "FROZEN":
        return StructureFrozenError(
            f"subjobs cannot be added or deleted: the barrier is {detail}", job=job)
    if code == "ABORTED":
        return BarrierAbortedError(f"aborted: {detail}", job=job, reason=detail)
    if code == "NOTREADY":
        return BarrierNotReadyError(f"subjob {detail!r} has not fully entered the barrier",
                                    job=job)
    if code == "BADRANK":
        return RuntimeMisuseError(f"rank {detail.split(' of ')[0]} outside the subjob "
                                  f"(size {detail.split(' of ')[-1]})", job=job)
    if code == "BADSIZE":
        told, _, declared = detail.partition(" of ")
        return RuntimeMisuseError(f"process count {told} differs from the subjob's declared "
                                  f"size {declared}", job=job)
    if code == "NOTINGROUP":
        return NotInGroupError(f"subjob {detail!r} is independent: it has no inter-subjob "
                               "communication", job=job)
    return CoordinationError(f"{code} {detail}".strip(), job=job)


_SCRIPT_SUFFIX = re.compile(r"\s*script: \w+, on @user_script:\d+\.?\s*$")
_CODED = re.compile(r"GTERR ([A-Z]+)(?: (.*))?$", re.S)


def _client_errors() -> tuple[tuple[type[BaseException], ...], ...]:
    """(no permission, authentication, connection, response) error classes of both clients.

    The job side uses :mod:`grid_tasks.duroc.resp`, the control side redis-py, which
    is not imported here: a redis-py error cannot occur before redis-py is imported,
    so its classes are looked up only once it is (and the runtime never loads it).
    """
    families: tuple[tuple[type[BaseException], ...], ...] = (
        (RespNoPermissionError,), (RespAuthenticationError,), (RespConnectionError,),
        (RespResponseError,))
    redis_errors = sys.modules.get("redis.exceptions")
    if redis_errors is not None:
        families = tuple((*ours, getattr(redis_errors, name)) for ours, name in zip(
            families, ("NoPermissionError", "AuthenticationError", "ConnectionError",
                       "ResponseError")))
    return families


@contextmanager
def translated(job: str | None) -> Iterator[None]:
    """Turn Redis client errors (ours or redis-py's) into typed grid_tasks errors naming
    the job; any other exception passes unchanged."""
    try:
        yield
    except Exception as exc:
        typed = _translation(exc, job)
        if typed is None:
            raise
        raise typed from None


def _translation(exc: Exception, job: str | None) -> Exception | None:
    """The typed error for a Redis client error ``exc``; None for any other exception."""
    no_permission, authentication, connection, response = _client_errors()
    if isinstance(exc, no_permission):
        # a job user met an empty script cache (Redis 7 names 'script|load', 6.2 'script')
        if "script|load" in str(exc) or "'script' command" in str(exc):
            return StoreUnavailableError(
                "the coordination scripts are not loaded on the Redis server (restarted or "
                "flushed): the control side reloads them (CoordinationStore.load_scripts)")
        return AccessDeniedError(f"access denied by the store: {exc}", job=job)
    if isinstance(exc, authentication):
        return StoreUnavailableError(f"coordination store refused the credentials: {exc}")
    if isinstance(exc, connection):
        return StoreUnavailableError(f"coordination store unreachable: {exc}")
    if isinstance(exc, response):
        # Redis appends "script: <sha>, on @user_script:<line>." to script errors
        text = _SCRIPT_SUFFIX.sub("", str(exc))
        coded = _CODED.search(text)  # our scripts' errors: "... GTERR CODE detail"
        if coded:
            return _error_for(coded.group(1), (coded.group(2) or "").strip(), job or "?")
        return CoordinationError(f"store error: {text}", job=job)
    return None
