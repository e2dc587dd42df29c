"""What the attacks act on: the running private grid, plus the few things they need
(an unprivileged account's name, a work folder, a key pair nobody trusts)."""

from __future__ import annotations

import itertools
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import func, select


from grid_tasks.db import session_scope
from grid_tasks.db.models import Job as JobRow
from grid_tasks.faults.harness import FaultGrid
from grid_tasks.security.connections import redis_client
from grid_tasks.security.keys import KeyPaths
from grid_tasks.security.refusals import counts

#: How long an attack waits for the grid to act on what it pushed.
REACTION_S = 15.0


@dataclass
class Target:
    """The grid under attack.  ``account``: the unprivileged account jobs are mapped to
    (None: jobs run as the invoking user, a one-user grid).  ``work``: a folder the
    account may enter but not write (job directories, a root-only file)."""

    fg: FaultGrid
    work: Path
    untrusted: KeyPaths
    account: str | None = None
    _ids: Any = field(default_factory=lambda: itertools.count(
        90_000_000 + secrets.randbelow(10**6)))

    def forged_job_id(self) -> int:
        """An id no job of this grid has (a launch for a job that does not exist)."""
        return next(self._ids)

    def marker(self, name: str) -> Path:
        """A file a forged launch would create, as root when the node daemon is root."""
        folder = self.fg.state_dir / "markers"
        folder.mkdir(mode=0o700, exist_ok=True)
        return folder / f"{name}-{secrets.token_hex(3)}"

    def refusals(self, queue: str | None = None) -> dict[str, int]:
        """Refused messages so far, by reason kind (the grid's own count; of ``queue``
        alone, when given)."""
        client = redis_client(self.fg.settings, self.fg.settings.redis_url)
        try:
            return counts(client, queue)
        finally:
            client.close()

    def await_refusal(self, kind: str, before: dict[str, int], *, also: Any = None,
                      timeout: float = REACTION_S, queue: str | None = None) -> bool:
        """Wait until a refusal of ``kind`` (on ``queue``, when given) is counted past
        ``before`` (True), or ``also()`` turns true, or ``timeout`` passes (False)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.refusals(queue).get(kind, 0) > before.get(kind, 0):
                return True
            if also is not None and also():
                return False
            time.sleep(0.05)
        return False

    def job_count(self) -> int:
        """How many jobs SQL holds."""
        with session_scope(self.fg.grid.sessions) as session:
            return int(session.execute(select(func.count()).select_from(JobRow)).scalar_one())
