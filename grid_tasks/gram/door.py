"""The one door: what a client asks of a resource manager's gatekeeper, and the answer.

A client never writes a job record itself.  It sends a signed request (a task on
the RM's queue ``gram.<rm>``) and the gatekeeper checks who signed it, maps that
subject through its own grid map, and records the job (GRAM's model: the
gatekeeper authenticates, authorizes and hands the job to its job manager).

Answers travel in the result backend as plain data: ``{"ok": {...}}`` or
``{"error": {"type", "message", "code", ...}}``.  A refusal is rebuilt into the
typed error the client would have got locally, from a fixed list of error types
(:data:`_ERRORS`): a name on the wire never selects arbitrary code to run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grid_tasks.errors import ConnectivityError, GridTasksError, NotFoundError, SourceError
from grid_tasks.gram.errors import JobFinishedError, JobRefusedError
from grid_tasks.security.errors import Unauthorized

SUBMIT = "grid_tasks.gram.tasks.submit"
CANCEL = "grid_tasks.gram.tasks.cancel"
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
    if isinstance(exc, SourceError):  # an RSLError: where in the request
        out.update(message=exc.message, line=exc.line, column=exc.column,
                   source=exc.location.source)
    return out


def _rsl(d: dict[str, Any]) -> GridTasksError:
    # (imported here: the rsl package loads its parsers, and node daemons import this)
    from grid_tasks.rsl.errors import RSLError

    return RSLError(d["message"], code=d.get("code") or "BAD_RSL", line=d.get("line"),
                    column=d.get("column"), source=d.get("source") or "<rsl>")


_ERRORS: dict[str, Callable[[dict[str, Any]], GridTasksError]] = {
    "RSLError": _rsl,
    "JobRefusedError": lambda d: JobRefusedError(d["message"], code=d.get("code")),
    "JobFinishedError": lambda d: JobFinishedError(d["message"], code=d.get("code")),
    "NotFoundError": lambda d: NotFoundError(d["message"]),
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


def ask(app: Any, task: str, rm: str, kwargs: dict[str, Any], *, shadow: str,
        timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    """Send ``task`` to ``rm``'s gatekeeper and wait for its answer; the typed error
    of a refusal, ConnectivityError when no gatekeeper answers in ``timeout``."""
    from celery.exceptions import TimeoutError as CeleryTimeout

    result = app.send_task(task, kwargs={"rm": rm, **kwargs}, expires=timeout,
                           shadow=shadow)
    try:
        reply = result.get(timeout=timeout, propagate=True, disable_sync_subtasks=False)
    except CeleryTimeout:
        raise ConnectivityError(
            f"no answer from {rm}'s gatekeeper (queue gram.{rm}) in {timeout:g} s: is "
            f"`grid-tasks worker --rm {rm}` running?") from None
    finally:
        result.forget()
    if not isinstance(reply, dict) or ("ok" not in reply and "error" not in reply):
        raise GridTasksError(f"{rm}'s gatekeeper sent an answer this client cannot read")
    if "error" in reply:
        raise error_from_wire(reply["error"])
    return dict(reply["ok"])
