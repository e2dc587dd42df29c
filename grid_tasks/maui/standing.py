"""Standing reservations (SRCFG): a reservation repeated every day or week.

A :class:`StandingReservation` describes the pattern; :meth:`instances` lists the
concrete windows that begin within ``depth`` periods from ``now``.  The scheduler adds
each instance as an administrative reservation named ``<name>.<period index>``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import floor, inf

from grid_tasks.maui.model import ACL, Reservation, SchedulerError

DAY = 86400.0
WEEK = 7 * DAY
#: 1970-01-01 was a Thursday: day index 0 is weekday 3 (MON = 0)
_EPOCH_WEEKDAY = 3
WEEKDAYS = ("MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")


@dataclass(frozen=True)
class StandingReservation:
    """Pattern of a standing reservation.

    ``start``/``end`` are offsets in seconds into each period (end 0 = end of period);
    ``period`` is DAY, WEEK or INFINITY (one reservation from ``start`` on, forever).
    Resources: ``tasks`` x ``procs_per_task`` or, with ``tasks`` 0, all of ``nodes``.
    """

    name: str
    acl: ACL = field(default_factory=ACL)
    tasks: int = 0
    procs_per_task: int = 1
    nodes: tuple[str, ...] = ()
    start: float = 0.0
    end: float = 0.0
    period: str = "DAY"
    depth: int = 2
    days: frozenset[str] = frozenset(WEEKDAYS)

    def __post_init__(self) -> None:
        if self.period not in ("DAY", "WEEK", "INFINITY"):
            raise SchedulerError(f"standing reservation {self.name}: PERIOD must be DAY, WEEK or INFINITY")
        if not self.tasks and not self.nodes:
            raise SchedulerError(f"standing reservation {self.name}: give TASKCOUNT/RESOURCES or HOSTLIST")

    def _length(self) -> float:
        return {"DAY": DAY, "WEEK": WEEK}.get(self.period, inf)

    def period_index(self, now: float) -> int:
        """The period ``now`` falls in: :meth:`instances` can only bring a new occurrence
        when it changes (within one period the list only loses occurrences that ended)."""
        return 0 if self.period == "INFINITY" else floor(now / self._length())

    def instances(self, now: float) -> list[Reservation]:
        """Concrete reservations for the periods overlapping ``[now, now + depth periods)``."""
        if self.period == "INFINITY":
            return [self._make(f"{self.name}.0", self.start, inf)]
        length = self._length()
        first = floor(now / length)
        out = []
        for k in range(first, first + max(self.depth, 1)):
            base = k * length
            if self.period == "DAY" and WEEKDAYS[(k + _EPOCH_WEEKDAY) % 7] not in self.days:
                continue
            start = base + self.start
            end = base + (self.end if self.end > self.start else length)
            if end > now:
                out.append(self._make(f"{self.name}.{k}", start, end))
        return out

    def _make(self, name: str, start: float, end: float) -> Reservation:
        return Reservation(name=name, start=start, end=end, acl=self.acl, tasks=self.tasks,
                           procs_per_task=self.procs_per_task, nodes=self.nodes)
