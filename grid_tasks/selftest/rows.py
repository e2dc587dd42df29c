"""A self-test row (attack, expected refusal, what happened, verdict) and the attack base."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:  # the target starts processes; listing attacks must not need it
    from grid_tasks.selftest.target import Target

OK, MISS, SKIPPED = "ok", "MISS", "skipped"


@dataclass(frozen=True)
class Row:
    """One attack's outcome.  ``verdict`` is ok (refused as expected), MISS (the attack
    got through, or the refusal could not be observed) or skipped (cannot run here)."""

    attack: str
    expected: str
    happened: str
    verdict: str
    seconds: float

    @property
    def ok(self) -> bool:
        """A skipped row is no miss: it says why it did not run."""
        return self.verdict != MISS

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


class Skip(Exception):
    """Raised by an attack that cannot be performed here (e.g. needs root)."""


class Attack:
    """One attack: :meth:`perform` carries it out and returns (refused?, what happened).

    Subclasses set ``name`` and ``expected``; any exception becomes a MISS naming it:
    a refusal that cannot be observed is not assumed.
    """

    name = ""
    expected = ""

    def run(self, target: "Target") -> Row:
        started = time.monotonic()
        try:
            refused, happened = self.perform(target)
            verdict = OK if refused else MISS
        except Skip as exc:
            verdict, happened = SKIPPED, f"skipped: {exc}"
        except Exception as exc:  # noqa: BLE001 - reported in the row, never hidden
            verdict, happened = MISS, f"{type(exc).__name__}: {exc}"
        return Row(self.name, self.expected, happened, verdict, time.monotonic() - started)

    def perform(self, target: "Target") -> tuple[bool, str]:
        raise NotImplementedError


def rows_table(rows: list[Row]) -> Table:
    """The rows as a rich table, misses in red."""
    table = Table(title="security self-test", show_lines=True)
    for column in ("attack", "expected refusal", "what happened", "result"):
        table.add_column(column, overflow="fold")
    style = {OK: "[green]ok[/]", MISS: "[red]MISS[/]", SKIPPED: "[yellow]skipped[/]"}
    for row in rows:
        table.add_row(row.attack, escape(row.expected), escape(row.happened),
                      f"{style[row.verdict]}\n{row.seconds:.1f} s")
    return table
