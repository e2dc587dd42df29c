"""The Legion enactor: turn an ordered list of candidate schedules into one reservation.

For each candidate in turn the enactor takes reservation tokens for every placement
(one atomic script), as a *difference set* against what it already holds: placements
unchanged since the previous candidate keep their tokens, the others are released and
acquired in the same script, so re-planning does not thrash reservations.  It then
asks the resource managers to confirm (``confirm_fn(schedule) -> bool``; the RM may
veto, and the live system writes its durable Maui reservation there) and binds the
tokens to the job.  On a refusal it moves to the next candidate, releasing (in that
candidate's difference set) what the candidate does not reuse; when none is left it
releases everything it holds and raises :class:`EnactmentRefused` with the reasons.

Failure semantics: a token refusal changes nothing (all or nothing) and a veto keeps
the tokens, the next candidate being diffed against them; a token that expired before
confirmation makes the enactor release everything and start the next one afresh.  If confirmation in Redis fails after ``confirm_fn`` accepted,
``undo_fn(schedule)`` is called so the durable side can roll back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from grid_tasks.broker.planner import Placement, Schedule, difference
from grid_tasks.errors import GridTasksError
from grid_tasks.legion.tokens import (
    Claim, RefusalReason, Token, TokenRefused, TokenStore, new_token_id)

log = logging.getLogger(__name__)

ConfirmFn = Callable[[Schedule], bool]
UndoFn = Callable[[Schedule], None]


class AttemptOutcome(str, Enum):
    """What happened to one candidate schedule."""

    CONFIRMED = "confirmed"
    NO_TOKENS = "no_tokens"  # a resource refused a token (full, unknown)
    STALE = "stale"          # a token held from an earlier candidate expired
    VETOED = "vetoed"        # a resource manager refused to confirm
    LOST = "lost"            # tokens expired or vanished before confirmation


@dataclass(frozen=True)
class Attempt:
    """One candidate tried: its outcome, the refusing resource (if any) and why."""

    index: int
    schedule: Schedule
    outcome: AttemptOutcome
    detail: str = ""
    resource: str | None = None
    kept: int = 0
    acquired: int = 0
    released: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "start": self.schedule.start,
                "outcome": self.outcome.value, "detail": self.detail,
                "resource": self.resource, "kept": self.kept, "acquired": self.acquired,
                "released": self.released}


@dataclass(frozen=True)
class Enactment:
    """The confirmed schedule, its durable tokens and the attempts it took."""

    job: str
    schedule: Schedule
    tokens: tuple[Token, ...]
    attempts: tuple[Attempt, ...] = field(default=())


class EnactmentRefused(GridTasksError):
    """No candidate schedule could be reserved; ``attempts`` says why for each."""

    def __init__(self, job: str, attempts: Sequence[Attempt]) -> None:
        self.job, self.attempts = job, tuple(attempts)
        reasons = "; ".join(f"#{a.index} {a.outcome.value}"
                            + (f" ({a.detail})" if a.detail else "") for a in attempts)
        super().__init__(f"no schedule could be reserved for job {job}: "
                         + (reasons or "no candidate schedules"))


def placement_claims(placement: Placement) -> list[Claim]:
    """One claim per node of a placement, on resource ``<rm>/<node>``."""
    end = placement.start + placement.duration
    return [Claim(f"{placement.rm}/{node}", placement.start, end, procs)
            for node, procs in placement.nodes]


class _Holding:
    """The tokens held, per placement of the schedule they were taken for."""

    def __init__(self) -> None:
        self.schedule: Schedule | None = None
        self.by_placement: dict[Placement, list[Token]] = {}

    def tokens(self, placements: Iterable[Placement] | None = None) -> list[Token]:
        chosen = self.by_placement if placements is None else placements
        return [t for p in chosen for t in self.by_placement[p]]

    def clear(self) -> None:
        self.schedule, self.by_placement = None, {}


class Enactor:
    """Reserves the first candidate schedule that every resource accepts."""

    def __init__(self, store: TokenStore, *, owner: str | None = None,
                 ttl: float | None = None) -> None:
        self.store = store
        self.owner = owner or f"broker-{new_token_id()}"
        self.ttl = ttl

    def enact(self, schedules: Iterable[Schedule], job: str, confirm_fn: ConfirmFn, *,
              undo_fn: UndoFn | None = None) -> Enactment:
        """Walk ``schedules`` in order; return the first confirmed one.

        Raises :class:`EnactmentRefused` when every candidate was refused, and lets
        :class:`~grid_tasks.errors.ConnectivityError` through (after releasing what
        it can) when Redis is unreachable.
        """
        held = _Holding()
        attempts: list[Attempt] = []
        try:
            for index, schedule in enumerate(schedules):
                attempt = self._try(index, schedule, job, held, confirm_fn, undo_fn)
                attempts.append(attempt)
                if attempt.outcome is AttemptOutcome.CONFIRMED:
                    tokens = tuple(held.tokens())
                    held.clear()  # confirmed: no longer ours to release
                    return Enactment(job, schedule, tokens, tuple(attempts))
        finally:
            self._release_quietly(held)
        raise EnactmentRefused(job, attempts)

    def _try(self, index: int, schedule: Schedule, job: str, held: _Holding,
             confirm_fn: ConfirmFn, undo_fn: UndoFn | None) -> Attempt:
        diff = difference(held.schedule, schedule)
        keep, release = held.tokens(diff.keep), held.tokens(diff.release)
        claims = [placement_claims(p) for p in diff.acquire]
        counts = {"kept": len(keep), "released": len(release),
                  "acquired": sum(len(c) for c in claims)}
        try:
            new = self.store.replace(keep, release, [c for cs in claims for c in cs],
                                     self.owner, ttl=self.ttl)
        except TokenRefused as refusal:
            if refusal.reason in (RefusalReason.EXPIRED, RefusalReason.GONE):
                self._release_quietly(held)  # our old tokens are stale: start afresh
                return Attempt(index, schedule, AttemptOutcome.STALE, str(refusal), None)
            return Attempt(index, schedule, AttemptOutcome.NO_TOKENS, str(refusal),
                           refusal.subject)
        self._hold(held, schedule, diff.keep, diff.acquire, claims, new)
        if not confirm_fn(schedule):
            # keep holding: the next candidate's difference set releases what it
            # does not reuse, so placements the RMs did not object to survive
            return Attempt(index, schedule, AttemptOutcome.VETOED,
                           "a resource manager vetoed the reservation", **counts)
        try:
            confirmed = self.store.confirm(held.tokens(), job)
        except TokenRefused as lost:
            self._undo(undo_fn, schedule)
            self._release_quietly(held)
            return Attempt(index, schedule, AttemptOutcome.LOST, str(lost), None, **counts)
        except BaseException:
            self._undo(undo_fn, schedule)
            raise
        by_id = {t.id: t for t in confirmed}
        held.by_placement = {p: [by_id[t.id] for t in ts] for p, ts in held.by_placement.items()}
        return Attempt(index, schedule, AttemptOutcome.CONFIRMED, "", None, **counts)

    @staticmethod
    def _hold(held: _Holding, schedule: Schedule, keep: Sequence[Placement],
              acquire: Sequence[Placement], claims: list[list[Claim]],
              new: list[Token]) -> None:
        by_placement = {p: held.by_placement[p] for p in keep}
        cursor = 0
        for placement, cs in zip(acquire, claims):
            by_placement[placement] = new[cursor:cursor + len(cs)]
            cursor += len(cs)
        held.schedule, held.by_placement = schedule, by_placement

    @staticmethod
    def _undo(undo_fn: UndoFn | None, schedule: Schedule) -> None:
        if undo_fn is not None:
            undo_fn(schedule)

    def _release_quietly(self, held: _Holding) -> None:
        """Release held tokens; if Redis is gone they expire by themselves."""
        tokens = held.tokens()
        held.clear()
        if not tokens:
            return
        try:
            self.store.release(tokens)
        except GridTasksError as exc:
            log.warning("could not release %d tokens (they will expire): %s", len(tokens), exc)
