"""Fuzzing helpers: a fixed hypothesis budget, near-valid mutations, the typed-error check.

The budget is ``GRID_TASKS_FUZZ_EXAMPLES`` examples per test (default 300), with a fixed
seed (``derandomize``) so CI sees the same inputs every run; raise it locally to dig.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from grid_tasks.errors import SourceError

EXAMPLES = int(os.environ.get("GRID_TASKS_FUZZ_EXAMPLES", "300"))

#: The settings every fuzz test uses.
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])

#: Characters that tend to matter to parsers, mixed into inserted text.
SPICE = "\n\r\t \\\"'()[]{}<>=!&|+-*/$#;:,.%^~_0123456789aZ\x00\x0b\x0c\u00a0\u2028\U0001F600"


def _edit(text: str, data: st.DataObject, alphabet: str) -> str:
    kind = data.draw(st.sampled_from(["delete", "insert", "replace", "duplicate", "swap"]))
    n = len(text)
    i = data.draw(st.integers(0, n))
    j = data.draw(st.integers(i, min(n, i + 12)))
    chunk = data.draw(st.text(alphabet=alphabet, min_size=1, max_size=6))
    if kind == "delete":
        return text[:i] + text[j:]
    if kind == "insert":
        return text[:i] + chunk + text[i:]
    if kind == "replace":
        return text[:i] + chunk + text[j:]
    if kind == "duplicate":
        return text[:j] + text[i:j] + text[j:]
    k = data.draw(st.integers(0, n))
    a, b = sorted((i, k))
    return text[:a] + text[b:b + 1] + text[a + 1:b] + text[a:a + 1] + text[b + 1:] if a < b < n else text


def mutated(samples: list[str], alphabet: str = SPICE, max_edits: int = 4) -> st.SearchStrategy[str]:
    """A valid sample with 1..max_edits character edits (delete, insert, replace, ...)."""

    @st.composite
    def build(draw: Callable[..., Any]) -> str:
        data = draw(st.data())
        text = draw(st.sampled_from(samples))
        for _ in range(draw(st.integers(1, max_edits))):
            text = _edit(text, data, alphabet)
        return text

    return build()


def noise(alphabet: str) -> st.SearchStrategy[str]:
    """Random text: any characters, or the language's own characters."""
    return st.one_of(st.text(max_size=80), st.text(alphabet=alphabet + SPICE, max_size=160))


def check_location(err: SourceError, text: str) -> None:
    """A located error points inside the text: a real line, a column on it (or just past)."""
    if err.line is None:
        assert err.column is None, f"column without a line: {err!r}"
        return
    by_newline = text.split("\n")
    by_any = text.splitlines() or [""]
    assert 1 <= err.line <= max(len(by_newline), len(by_any)), f"line outside the text: {err!r}"
    if err.column is None:
        return
    candidates = [lines[err.line - 1] for lines in (by_newline, by_any) if err.line <= len(lines)]
    widest = max((len(c) for c in candidates), default=0)
    assert 1 <= err.column <= widest + 1, f"column outside line {err.line}: {err!r}"


def only_typed(fn: Callable[[], Any], error: type[SourceError], text: str | None) -> Any:
    """Run ``fn``: a result, or ``error`` located inside ``text`` (None: not checked);
    anything else fails."""
    try:
        return fn()
    except error as err:
        if text is not None:
            check_location(err, text)
        assert str(err) and err.pretty()
        return err
