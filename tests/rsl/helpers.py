"""Shared helpers for the RSL tests."""

from __future__ import annotations


def position_of(text: str, culprit: str, occurrence: int = 1) -> tuple[int, int]:
    """1-based (line, column) of the ``occurrence``-th ``culprit`` in ``text``."""
    offset = -1
    for _ in range(occurrence):
        offset = text.index(culprit, offset + 1)
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, column
