"""Node lists in their compact form (grid_tasks.hostlist)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from grid_tasks.hostlist import HostlistError, compress, expand


def test_ranges_keep_their_width_and_lists_their_order():
    assert expand("n[001-003],login,x[1-2,9]y") == ["n001", "n002", "n003", "login",
                                                  "x1y", "x2y", "x9y"]
    assert expand("n[8-11]") == ["n8", "n9", "n10", "n11"]


@pytest.mark.parametrize("text,words", [
    ("n[1-3", "NAME\\[RANGES\\]SUFFIX"), ("n[1-3][4]", "NAME\\[RANGES\\]SUFFIX"),
    ("n[3-1]", "backwards"), ("n[a-b]", "whole numbers"), ("a,,b", "empty entry"),
    ("n[1-2],n2", "named twice"), ("n[1-1000000]", "too long"),
])
def test_bad_lists_are_refused_naming_the_part(text, words):
    with pytest.raises(HostlistError, match=words):
        expand(text)


def test_compress_writes_runs_as_ranges():
    names = [f"r{r}n{n:03d}" for r in range(2) for n in range(1, 101)] + ["login"]
    assert compress(names) == "r0n[001-100],r1n[001-100],login"
    assert compress(["n9", "n10", "a"]) == "n9,n10,a"  # widths differ: not one range


@settings(deadline=None)  # a loaded CI machine is no reason to fail
@given(st.lists(st.from_regex(r"[a-c]{1,2}[0-9]{1,3}|[a-c]{1,3}", fullmatch=True),
                unique=True, max_size=30))
def test_compress_then_expand_gives_the_names_back(names):
    assert expand(compress(names)) == names if names else compress(names) == ""
