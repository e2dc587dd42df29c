"""Coallocation with a guaranteed common start: co-reserve first, then submit through DUROC.

:func:`coallocate` is what :meth:`grid_tasks.client.Grid.job_request` calls when the
broker is wanted (asked for, or some component lacks ``resourceManagerContact``):

1. the broker places the components and co-reserves one grid reservation per subjob,
   all starting at one common instant (:meth:`.live.Broker.coreserve`);
2. the request is rewritten, each component now carrying
   ``(resourceManagerContact=RM)(reservation=NAME)`` (:func:`placed_rsl`), and submitted
   as an ordinary DUROC job whose barrier deadline also covers the wait for the start;
   each GRAM subjob is bound to its reservation, so its RM starts it when the
   reservation begins, and the barrier releases them together;
3. every RM of the schedule gets an iteration at the common start, so the subjobs
   start then even on an otherwise idle RM.

If the DUROC submission fails, the co-reservation is released again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from grid_tasks.broker.coreservation import CoReservation
from grid_tasks.broker.live import DEFAULT_LEAD_S, Broker, new_job_key
from grid_tasks.duroc.client import CoallocClient
from grid_tasks.duroc.handle import CoallocHandle
from grid_tasks.effects import send_iteration
from grid_tasks.legion.collection import Requester
from grid_tasks.rsl import Boolean, BoolOp, Literal, RelOp, Relation, lower, unparse, validate
from grid_tasks.services import Services

__all__ = ["coallocate", "placed_rsl", "wake_at", "PLACEMENT_KEYS"]

log = logging.getLogger(__name__)

#: The attributes the broker writes into each placed component.
PLACEMENT_KEYS = frozenset({"resourcemanagercontact", "reservation"})


def placed_rsl(rsl: str, co: CoReservation, *, variables: Mapping[str, str] | None = None,
               source: str = "<rsl>") -> str:
    """``rsl`` (evaluated) with component ``i`` fixed to part ``i``'s RM and reservation."""
    spec = validate(rsl, variables, source=source)
    comps = spec.operands if isinstance(spec, Boolean) and spec.op is BoolOp.MULTI else (spec,)
    by_index = {p.index: p for p in co.parts}
    out = []
    for index, comp in enumerate(comps):
        part = by_index[index]
        relations = comp.operands if isinstance(comp, Boolean) else (comp,)
        kept = tuple(r for r in relations
                     if not (isinstance(r, Relation) and r.key in PLACEMENT_KEYS))
        out.append(Boolean(BoolOp.AND, kept + (
            Relation("resourceManagerContact", RelOp.EQ, (Literal(part.rm),)),
            Relation("reservation", RelOp.EQ, (Literal(part.name),)))))
    return unparse(Boolean(BoolOp.MULTI, tuple(out)))


def wake_at(app: Any, rms: Any, start: float, now: float) -> None:
    """An iteration of each RM at ``start``: a bound subjob starts when its reservation
    begins even if nothing else wakes its RM then (triggers are folded, so harmless)."""
    delay = max(0.0, start - now) + 0.05
    for rm in rms:
        try:
            send_iteration(app, rm, why="reservation start", countdown=delay)
        except Exception as exc:  # noqa: BLE001 - the job exists: its RM's own watch or
            # beat still starts it, only later; never lose the handle over a wake-up
            log.warning("no wake-up iteration of %s at the reservation start: %s", rm, exc)


def coallocate(services: Services, coallocator: CoallocClient, rsl: str, *,
               user: str | None, barrier_timeout: float,
               variables: dict[str, str] | None, source: str, coreserve: bool | None,
               allow_early: bool = False, lead: float | None = None,
               subs: list[Any] | None = None) -> Any:
    """Co-reserve and submit ``rsl`` (see the module docstring); its CoallocHandle, with
    the :class:`CoReservation` as ``handle.coreservation``.  None when the broker is not
    wanted (``coreserve`` None and every component names its RM).  ``subs``: ``rsl``
    lowered already (with ``variables``), not parsed again."""
    if subs is None:
        subs = lower(rsl, variables, source=source,
                     max_substitution=services.settings.rsl_max_substitution)
    if coreserve is False or (coreserve is None and all(s.rm_contact for s in subs)):
        return None
    requester = Requester.current()
    if user:
        requester = Requester(user, requester.groups, requester.host)
    broker = Broker.for_settings(services.settings, services.app,
                                 lead=DEFAULT_LEAD_S if lead is None else lead)
    try:
        now = time.time()
        co = broker.coreserve(broker.components(subs, requester), now=now,
                              job_key=new_job_key("coalloc"), requester=requester,
                              allow_early=allow_early)
        try:
            waiting = max(0.0, co.start - time.time())
            job_id = coallocator.job_request(
                placed_rsl(rsl, co, variables=variables, source=source), user=user,
                barrier_timeout=float(barrier_timeout) + waiting, source=source)
        except BaseException:
            broker.release(co)
            raise
        wake_at(services.app, co.rms, co.start, time.time())
        broker.sweep(now)  # earlier jobs' tokens whose reservations are over
    finally:
        broker.close()
    handle = CoallocHandle(coallocator, job_id)
    handle.coreservation = co  # type: ignore[attr-defined]
    return handle
