"""Waiting in tests for something real processes do: poll until true, or fail saying what."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def until(check: Callable[[], T], timeout: float, what: str, poll: float = 0.05) -> T:
    """``check()``'s first truthy value within ``timeout`` seconds; an AssertionError
    naming ``what`` if none came."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(poll)
