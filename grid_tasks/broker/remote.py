"""Calls to every RM's metascheduler tasks (seed 002's *estimate* and *reserve*), fanned out.

The broker never imports the RM side: it sends the tasks by name
(:data:`ESTIMATE`, :data:`RESERVE`, :data:`RELEASE`; the Celery router sends them to
the scheduler queue) and waits for all answers of a batch together, under one
deadline.  An answer that does not come in time is an :class:`Outcome` with
``timed_out`` set; the caller decides (an RM that does not answer an estimate is left
out; a reserve that timed out may still happen, so it is released like a made one).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from celery.exceptions import TimeoutError as CeleryTimeout

from grid_tasks import effects
from grid_tasks.legion.collection import Requester
# imported for Celery: a refused reserve is rebuilt as ReservationRefused in this process
from grid_tasks.legion.refusals import ReservationRefused  # noqa: F401
from grid_tasks.queues import readable

log = logging.getLogger(__name__)

ESTIMATE = "grid_tasks.scheduling.rm_tasks.estimate"
RESERVE = "grid_tasks.scheduling.rm_tasks.reserve"
RELEASE = "grid_tasks.scheduling.rm_tasks.release"
MARK_ENACTED = "grid_tasks.scheduling.rm_tasks.mark_enacted"
RESTORE_TOKENS = "grid_tasks.scheduling.rm_tasks.restore_tokens"
CAPACITIES = "grid_tasks.scheduling.rm_tasks.capacities"
PRUNE = effects.PRUNE  # also sent by a Slurm RM's follower, through the effects module

#: Seconds a batch of RM calls may take before the missing answers count as timed out.
DEFAULT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Outcome:
    """One RM call: its value, or the error it raised, or no answer in time."""

    value: Any = None
    error: BaseException | None = None
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None and not self.timed_out

    @property
    def refused(self) -> bool:
        """The RM answered with a refusal (not a time-out)."""
        return self.error is not None

    def reason(self) -> str:
        if self.timed_out:
            return "no answer in time"
        if self.error is not None:
            return f"{type(self.error).__name__}: {self.error}"
        return ""


def requester_dict(requester: Requester | None, group: str | None = None,
                   account: str | None = None) -> dict[str, str] | None:
    """The ``requester`` argument of the RM tasks (user, group, account, host).

    The group is the job's own (as GRAM records it), not any group of the requester:
    a reservation admitting one of them would not admit the job."""
    if requester is None:
        return None
    out = {"user": requester.user, "host": requester.host, "group": group,
           "account": account}
    return {k: v for k, v in out.items() if v}


class RemoteRMs:
    """Sends RM tasks by name on ``app`` and gathers their answers in parallel."""

    def __init__(self, app: Any, *, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.app = app
        self.timeout = float(timeout)

    def call_all(self, name: str, calls: Sequence[Mapping[str, Any]],
                 timeout: float | None = None) -> list[Outcome]:
        """Send every call of ``name`` at once, then collect each answer (same order)."""
        sent = [self.app.send_task(name, kwargs=dict(kw),
                                   **readable(name.rsplit(".", 1)[-1], rm=kw.get("rm")))
                for kw in calls]
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        return [self._collect(result, deadline) for result in sent]

    @staticmethod
    def _collect(result: Any, deadline: float) -> Outcome:
        try:
            value = result.get(timeout=max(0.01, deadline - time.monotonic()),
                               propagate=True, disable_sync_subtasks=False)
        except CeleryTimeout:
            _forget(result)
            return Outcome(timed_out=True)
        except Exception as exc:  # noqa: BLE001 - the RM's refusal, rebuilt by Celery
            return Outcome(error=exc)
        return Outcome(value=value)

    # -- the three calls -----------------------------------------------------------------
    def estimate(self, asks: Sequence[tuple[str, int, float, float]], *, limit: int = 1,
                 requester: Mapping[str, Any] | None = None) -> list[Outcome]:
        """``asks`` of (rm, procs, duration, not_before); answers as lists of
        ``(time, {node: procs})``, earliest first (``[]``: never)."""
        calls = [{"rm": rm, "procs": int(procs), "duration": float(duration),
                  "not_before": float(t), "limit": int(limit),
                  "requester": dict(requester) if requester else None}
                 for rm, procs, duration, t in asks]
        out = []
        for (rm, *_), outcome in zip(asks, self.call_all(ESTIMATE, calls)):
            if outcome.ok:
                outcome = Outcome(value=_starts(rm, outcome.value))
            out.append(outcome)
        return out

    def reserve(self, calls: Sequence[Mapping[str, Any]]) -> list[Outcome]:
        """``reserve`` on each RM (kwargs as the task takes them); refusals as errors."""
        return self.call_all(RESERVE, calls)

    def release(self, calls: Sequence[Mapping[str, Any]]) -> list[Outcome]:
        """``release`` on each RM; a failure is logged (the RM prunes it later anyway)."""
        if not calls:
            return []
        outcomes = self.call_all(RELEASE, calls)
        for kw, outcome in zip(calls, outcomes):
            if not outcome.ok:
                log.warning("release of grid reservation %s on %s failed (%s); the RM prunes "
                            "it once its token is gone", kw.get("name"), kw.get("rm"),
                            outcome.reason())
        return outcomes


    def mark_enacted(self, parts: Sequence[tuple[str, str, str]]) -> int:
        """Have each RM mark its parts ``(rm, name, token)`` enacted; how many are (a
        failed RM counts none of its parts)."""
        by_rm: dict[str, list[list[str]]] = {}
        for rm, name, token in parts:
            by_rm.setdefault(rm, []).append([name, token])
        outcomes = self.call_all(MARK_ENACTED, [{"rm": rm, "parts": named}
                                                for rm, named in sorted(by_rm.items())])
        return sum(int(o.value) for o in outcomes if o.ok)

    def capacities(self, rms: Sequence[str]) -> dict[str, int]:
        """Processors per ``rm/node`` of each of ``rms`` as the RM itself counts them
        (a Slurm partition is not in the collection); an RM that fails adds none."""
        out: dict[str, int] = {}
        for rm, outcome in zip(rms, self.call_all(CAPACITIES, [{"rm": rm} for rm in rms])):
            if not outcome.ok:
                log.warning("capacities of %s unknown: %s", rm, outcome.reason())
                continue
            out.update({f"{rm}/{node}": int(procs) for node, procs in dict(outcome.value).items()})
        return out

    def restore_tokens(self, rm: str) -> bool:
        """Have ``rm``'s scheduler restore the grid's token store from SQL if it lost its
        state; False when it did not answer (or another process is restoring it)."""
        (outcome,) = self.call_all(RESTORE_TOKENS, [{"rm": rm}])
        return bool(outcome.ok and outcome.value)


def _starts(rm: str, answer: Any) -> list[tuple[float, dict[str, int]]]:
    """An estimate answer as ``[(time, {node: procs})]``; a malformed one reads as never."""
    out = []
    for item in answer or ():
        try:
            out.append((float(item["time"]), {str(n): int(p)
                                              for n, p in dict(item["allocation"]).items()}))
        except (KeyError, TypeError, ValueError):
            log.warning("resource manager %s answered a malformed estimate %r", rm, item)
            return []
    return sorted(out, key=lambda a: a[0])


def _forget(result: Any) -> None:
    """Stop listening for a result nobody will read (its late answer is dropped)."""
    backend = getattr(result, "backend", None)
    if backend is not None and hasattr(backend, "remove_pending_result"):
        try:
            backend.remove_pending_result(result)
        except Exception:  # noqa: BLE001 - best effort: the result expires anyway
            pass
