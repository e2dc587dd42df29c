"""Recording a co-reservation as enacted: where the durable mark is written.

Once a broker has confirmed its tokens it marks each part's grid reservation enacted
in SQL, so that a token store that lost its state is restored with exactly the
complete co-reservations (:mod:`grid_tasks.scheduling.grid_reservations`); before it
enacts it has a store that lost its state restored first.  Who writes is a policy
chosen once, when the broker is made:

* :class:`RemoteEnactment` - the RMs do (tasks ``mark_enacted`` and ``restore_tokens``
  on the scheduler queue, where their iterations run): a broker, even one an
  application runs, needs no database;
* :class:`Unrecorded` - nobody (a broker without a grid behind it: nothing survives a
  Redis loss).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from grid_tasks.broker.coreservation import ReservedPart
from grid_tasks.broker.remote import RemoteRMs
from grid_tasks.legion.tokens import TokenStore

log = logging.getLogger(__name__)


class Unrecorded:
    """Marks nothing, restores nothing: the no-op base of the policies."""

    def mark(self, parts: Sequence[ReservedPart]) -> int:
        """Mark ``parts`` enacted; how many are marked now (all: nothing to mark here)."""
        return len(parts)

    def restore(self, store: TokenStore, now: float, rms: Sequence[str]) -> None:
        """Have ``store`` restored from SQL if it lost its state (before enacting)."""


class RemoteEnactment(Unrecorded):
    """The parts' RMs write the marks; one of them restores the store."""

    def __init__(self, remote: RemoteRMs) -> None:
        self.remote = remote

    def mark(self, parts: Sequence[ReservedPart]) -> int:
        return self.remote.mark_enacted([(p.rm, p.name, p.token) for p in parts])

    def restore(self, store: TokenStore, now: float, rms: Sequence[str]) -> None:
        if rms and not self.remote.restore_tokens(sorted(rms)[0]):
            log.warning("token store not restored from SQL before enacting (its RM did "
                        "not answer); the RMs' reserve still vetoes")
