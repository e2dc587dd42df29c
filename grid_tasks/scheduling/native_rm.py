"""The native Maui RM behind the one RM interface: :mod:`grid_tasks.scheduling.rm_service`
answers (its core loaded from SQL, reservations checked node by node, the node daemons'
liveness from the registry)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.orm import Session

from grid_tasks.db import repository
from grid_tasks.scheduling import rm_service
from grid_tasks.scheduling.rm_backend import Forget, RMBackend
from grid_tasks.topology import RMKind


class NativeRM(RMBackend):
    """A grid_tasks resource manager scheduled by its own Maui core."""

    kind = RMKind.MAUI

    def __init__(self, rm: str, registry: Any = None) -> None:
        super().__init__(rm)
        self.registry = registry

    def estimate(self, session: Session, *, procs: int, duration: float, not_before: float,
                 now: float, limit: int = 3,
                 requester: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        return rm_service.estimate(session, self.rm, procs=procs, duration=duration,
                                   not_before=not_before, now=now, limit=limit,
                                   requester=requester, registry=self.registry)

    def reserve(self, session: Session, *, name: str, allocation: Mapping[str, int],
                start: float, duration: float, token: str, job_key: str, now: float,
                label: str | None = None, allow_early: bool = False,
                requester: Mapping[str, Any] | None = None,
                account: str | None = None) -> dict[str, Any]:
        # the account is the job's: the row's ACL binds the job itself, not a user
        return rm_service.reserve(session, self.rm, name=name, allocation=allocation,
                                  start=start, duration=duration, token=token,
                                  job_key=job_key, now=now, label=label,
                                  allow_early=allow_early, requester=requester,
                                  registry=self.registry)

    def release(self, session: Session, *, name: str, token: str | None = None,
                now: float | None = None, forget: Forget | None = None) -> bool:
        return rm_service.release(session, self.rm, name=name, token=token, now=now,
                                  forget=forget)

    def capacities(self, session: Session) -> dict[str, int]:
        return {n.name: int(n.procs) for n in repository.list_nodes(session, self.rm)
                if int(n.procs or 0) > 0}
