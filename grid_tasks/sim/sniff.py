"""Telling text from binary data by a sample of its first bytes (pure code).

A trace reader looks at a file's start before reading it by lines: a binary file may
hold no newline for megabytes, and its bytes must never reach a terminal.
"""

from __future__ import annotations

import re

__all__ = ["SNIFF_BYTES", "binary_at"]

#: Bytes looked at for binary data before reading a trace.
SNIFF_BYTES = 4096
_BINARY = re.compile(rb"[\x00-\x08\x0e-\x1f\x7f]")


def binary_at(sample: bytes) -> tuple[int, int, int] | None:
    """(line, column, byte) of the first control character text never holds, or None.

    Bytes that are not UTF-8 do not count: a Latin-1 header comment is still text.
    """
    match = _BINARY.search(sample)
    if match is None:
        return None
    pos = match.start()
    line_start = sample.rfind(b"\n", 0, pos) + 1
    column = len(sample[line_start:pos].decode("utf-8", "replace")) + 1  # in characters
    return sample.count(b"\n", 0, pos) + 1, column, sample[pos]
