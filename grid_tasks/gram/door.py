"""The one door: what a client asks of a resource manager's gatekeeper, and the answer.

A client never writes a job record itself.  It sends a signed request (a task on
the RM's queue ``gram.<rm>``) and the gatekeeper checks who signed it, maps that
subject through its own grid map, and records the job (GRAM's model: the
gatekeeper authenticates, authorizes and hands the job to its job manager).

Door tasks track no STARTED state (a result backend write per request that nobody
reads: the client waits for the answer alone).  Answers travel in the result backend
as plain data: ``{"ok": {...}}`` or
``{"error": {"type", "message", "code", ...}}``.  A refusal is rebuilt into the
typed error the client would have got locally, from a fixed list of error types
(:data:`_ERRORS`): a name on the wire never selects arbitrary code to run.

A coallocated (DUROC) job spans RMs: its door is the scheduler queue (:func:`ask`
without an RM), served by the scheduler worker (``grid_tasks.duroc.tasks``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from grid_tasks.errors import (
    ConnectivityError,
    GridTasksError,
    NotFoundError,
    SourceError,
    StorageUnavailable,
)
from grid_tasks.gram.errors import JobFinishedError, JobRefusedError
from grid_tasks.rsl.errors import RSLError
from grid_tasks.security.errors import Unauthorized

SUBMIT = "grid_tasks.gram.gatekeeper.submit"
CANCEL = "grid_tasks.gram.gatekeeper.cancel"
STATUS = "grid_tasks.gram.gatekeeper.status"
#: How long a client waits for a gatekeeper's answer (seconds); the request expires
#: then, so a gatekeeper started later never acts on a request nobody waits for.
DEFAULT_TIMEOUT_S = 30.0


def error_to_wire(exc: GridTasksError) -> dict[str, Any]:
    """A refusal as data, for the client to rebuild with :func:`error_from_wire`."""
    out: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
    code = getattr(exc, "code", None)
    out["code"] = str(code) if code is not None else None
    if isinstance(exc, Unauthorized):
        out.update(identity=exc.identity, rm=exc.rm)
    if isinstance(exc, StorageUnavailable):  # which database, and why
        out.update(database=exc.database, cause=exc.cause)
    if isinstance(exc, SourceError):  # an RSLError: where in the request
        out.update(message=exc.message, line=exc.line, column=exc.column,
                   source=exc.location.source)
    return out


def _rsl(d: dict[str, Any]) -> GridTasksError:
    return RSLError(d["message"], code=d.get("code") or "BAD_RSL", line=d.get("line"),
                    column=d.get("column"), source=d.get("source") or "<rsl>")


def _lazy(module: str, name: str) -> Callable[[dict[str, Any]], GridTasksError]:
    """A builder of ``module.name(message)``, imported only when such a refusal comes
    (node daemons import this module and must not load the DUROC store's client)."""
    def build(d: dict[str, Any]) -> GridTasksError:
        return getattr(importlib.import_module(module), name)(d["message"])
    return build


_DUROC_ERRORS = {name: _lazy("grid_tasks.duroc.errors", name) for name in (
    "CoallocRequestError", "CoallocFinishedError", "SubjobFailedError")}
_STORE_ERRORS = {name: _lazy("grid_tasks.duroc.store_errors", name) for name in (
    "JobNotFoundError", "SubjobNotFoundError", "StructureFrozenError", "BarrierAbortedError",
    "BarrierNotReadyError", "BarrierTimeoutError")}

def _slurm(name: str) -> Callable[[dict[str, Any]], GridTasksError]:
    """A builder of a Slurm RM's refusal with its GRAM error (imported when one comes)."""
    def build(d: dict[str, Any]) -> GridTasksError:
        error = getattr(importlib.import_module("grid_tasks.slurm.errors"), name)
        if name == "SlurmUnavailable":  # always CONNECTION_FAILED
            return error(d["message"])
        return error(d["message"], code=d.get("code"))
    return build


_SLURM_ERRORS = {name: _slurm(name) for name in (
    "SlurmError", "SlurmUntranslatable", "SlurmUnavailable", "SlurmRefused", "ReservationInUse")}

_ERRORS: dict[str, Callable[[dict[str, Any]], GridTasksError]] = {
    **_DUROC_ERRORS, **_STORE_ERRORS, **_SLURM_ERRORS,
    "RSLError": _rsl,
    "JobRefusedError": lambda d: JobRefusedError(d["message"], code=d.get("code")),
    "JobFinishedError": lambda d: JobFinishedError(d["message"], code=d.get("code")),
    "NotFoundError": lambda d: NotFoundError(d["message"]),
    "ConnectivityError": lambda d: ConnectivityError(d["message"]),
    "StorageUnavailable": lambda d: StorageUnavailable(
        str(d.get("database") or "?"), str(d.get("cause") or ""), message=d["message"]),
    "Unauthorized": lambda d: Unauthorized(d["message"], identity=d.get("identity") or "",
                                           rm=d.get("rm") or ""),
}


class RemoteError(GridTasksError):
    """A refusal of a type this client does not rebuild: its message, and the type's
    name in ``type_name``."""

    def __init__(self, message: str, type_name: str = "") -> None:
        super().__init__(message)
        self.type_name = type_name


def error_from_wire(data: dict[str, Any]) -> GridTasksError:
    """The typed error a gatekeeper's refusal stands for (RemoteError if none fits)."""
    build = _ERRORS.get(str(data.get("type")))
    if build is None:
        return RemoteError(str(data.get("message")), str(data.get("type")))
    return build(data)


def answer(call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run a gatekeeper's side of a request: its result, or its refusal, as data."""
    try:
        return {"ok": call()}
    except GridTasksError as exc:
        return {"error": error_to_wire(exc)}


def ask(app: Any, task: str, rm: str | None, kwargs: dict[str, Any], *, shadow: str,
        timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    """Send ``task`` to ``rm``'s gatekeeper (``rm`` None: to the scheduler queue, the
    door of what spans RMs) and wait for its answer; the typed error of a refusal,
    ConnectivityError when nobody answers in ``timeout``."""
    from celery.exceptions import TimeoutError as CeleryTimeout

    sent = kwargs if rm is None else {"rm": rm, **kwargs}
    who, worker = ((f"{rm}'s gatekeeper (queue gram.{rm})", f"--rm {rm}") if rm is not None
                   else ("the scheduler (queue scheduler)", "--scheduler"))
    result = app.send_task(task, kwargs=sent, expires=timeout, shadow=shadow)
    try:
        reply = result.get(timeout=timeout, propagate=True, disable_sync_subtasks=False)
    except CeleryTimeout:
        raise ConnectivityError(f"no answer from {who} in {timeout:g} s: is "
                                f"`grid-tasks worker {worker}` running?") from None
    finally:
        result.forget()
    if not isinstance(reply, dict) or ("ok" not in reply and "error" not in reply):
        raise GridTasksError(f"{who} sent an answer this client cannot read")
    if "error" in reply:
        raise error_from_wire(reply["error"])
    return dict(reply["ok"])
