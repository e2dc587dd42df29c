"""Name-to-class lookup shared by the policy factories, with one clear error.

Each concern (queue, backfill, availability) keeps a table from its configuration
enum to the class implementing it; the table is consulted once, when a scheduler or
engine is built, so no iteration ever branches on a policy name again.
"""

from __future__ import annotations

from enum import Enum
from typing import Mapping, TypeVar

from grid_tasks.maui.config import UnknownPolicyError

T = TypeVar("T")


def lookup(table: Mapping[Enum, T], parameter: str, name: object) -> T:
    """The entry of ``table`` for ``name`` (an enum member or its value, any case)."""
    key = name.value if isinstance(name, Enum) else str(name).strip().upper()
    for member, entry in table.items():
        if member.value == key:
            return entry
    known = ", ".join(m.value for m in table)
    raise UnknownPolicyError(f"{parameter} {name!r} is not a known policy; choose one of {known}")


__all__ = ["UnknownPolicyError", "lookup"]
