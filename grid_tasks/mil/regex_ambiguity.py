"""Which repetitions of a regex can make a backtracking matcher take exponential time.

A backtracking matcher (Python ``re``) takes exponential time on a near-miss when a
repetition can consume the same text along two different paths: ``(a|a)*``,
``(a+)+``, ``(a?a?)+``, ``(?:a|aa)+``, ``(.|a)*``.  Every repetition (any count
above one) is therefore checked to be *unambiguous*, on a Glushkov automaton of the
parse tree that counts paths: positions are the one-character items, and each
position's successors inside the repetition (its back edge included) must be at most
one path each and match pairwise disjoint characters; so must the items it can start
with, and its body must not match the empty string.  An unambiguous repetition
never offers the matcher two live choices past the next character, however it nests.

The check works on ``re``'s own parse tree, so it sees exactly what the matcher runs
(``ab|ac`` is already ``a[bc]`` there).  It is conservative: character sets are
over-approximated (:mod:`grid_tasks.mil.regex_charset`), counted repeats ``{m,n}``
with ``m < n`` are treated like a loop, and some harmless patterns (``(?:a{1,2}b?)+``)
are refused.  Possessive repeats ``*+`` never backtrack into themselves and are not
checked as loops, their insides are.  (``(\\w|\\d)+`` passes: ``re`` makes the
alternation one character set, which cannot backtrack.)

Loops in a row multiply instead: ``a*a*a*b`` tries about n**3 splits.  :meth:`chain`
refuses more than :data:`MAX_CHAIN` loops in a row that can read the same text.  The
vetting itself is bounded by :data:`WORK_LIMIT` steps (Glushkov edges can be quadratic).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from grid_tasks.mil.regex_charset import ALL, Intervals, item_chars, normal, overlap

Counts = dict[int, int]  # position -> number of paths (2 means "two or more")

_CHARS = {"LITERAL", "NOT_LITERAL", "ANY", "IN"}
_LOOPS = {"MAX_REPEAT", "MIN_REPEAT"}
_EXPAND_POSITIONS = 64  # an exact repeat {n} is unrolled up to this many positions
MAX_CHAIN = 2  # loops in a row that may read the same text: n**(MAX_CHAIN + 1) tries
WORK_LIMIT = 200_000  # edges and visits the vetting may spend (a few tenths of a second)


class TooComplex(Exception):
    """The pattern would take the vetting itself too long; refused."""

EMPTY_BODY = "repeats something that can match the empty string (like '(a?)*' or '(a|)+')"
AMBIGUOUS_BODY = ("repeats something that can match the same text in more than one way "
                  "(like '(a+)+', '(a|a)*' or '(a?a?)+')")
CHAINED_LOOPS = (f"has more than {MAX_CHAIN} repetitions in a row that can read the same text "
                 "(like '.*a.*a.*b' or 'a*a*a*b'), so its time grows as a high power of the "
                 "subject's length")


def _add(*parts: Counts) -> Counts:
    out: Counts = {}
    for part in parts:
        for pos, n in part.items():
            out[pos] = min(2, out.get(pos, 0) + n)
    return out


def _times(counts: Counts, n: int) -> Counts:
    return {pos: min(2, k * n) for pos, k in counts.items()} if n else {}


@dataclass
class _Frag:
    """A sub-expression: paths matching empty (0, 1, 2+), first and last positions."""

    empty: int
    first: Counts = field(default_factory=dict)
    last: Counts = field(default_factory=dict)


_EPSILON = _Frag(1)


class _Automaton:
    """Positions, their characters and counted successor edges, built item by item."""

    def __init__(self) -> None:
        self.chars: list[Intervals] = []
        self.follow: list[Counts] = []
        self.problem: tuple[int, str] | None = None  # (id of the repeat's arguments, why)
        self.loops: list[tuple[int, int, int]] = []  # (id of arguments, first, end position)
        self.work = 0

    def position(self, chars: Intervals, empty: int = 0) -> _Frag:
        self.chars.append(chars)
        self.follow.append({})
        pos = len(self.chars) - 1
        return _Frag(empty, {pos: 1}, {pos: 1})

    def spend(self, work: int) -> None:
        self.work += work
        if self.work > WORK_LIMIT:
            raise TooComplex(f"regular expression too complex to vet for backtracking "
                             f"(over {WORK_LIMIT} steps); simplify it")

    def link(self, last: Counts, first: Counts) -> None:
        self.spend(len(last) * len(first))
        for p, a in last.items():
            successors = self.follow[p]
            for q, b in first.items():
                successors[q] = min(2, successors.get(q, 0) + a * b)

    def seq(self, items: Any, icase: bool) -> _Frag:
        """Concatenation: each item's first positions follow what can end before it."""
        acc = _EPSILON
        for op, av in items:
            acc = self.then(acc, self.item(str(op), av, icase))
        return acc

    def then(self, left: _Frag, right: _Frag) -> _Frag:
        """``left`` followed by ``right`` (its edges added)."""
        self.link(left.last, right.first)
        return _Frag(min(2, left.empty * right.empty),
                     _add(left.first, _times(right.first, left.empty)),
                     _add(right.last, _times(left.last, right.empty)))

    def alternatives(self, branches: Any, icase: bool) -> _Frag:
        frags = [self.seq(branch, icase) if branch is not None else _EPSILON for branch in branches]
        return _Frag(min(2, sum(f.empty for f in frags)),
                     _add(*(f.first for f in frags)), _add(*(f.last for f in frags)))

    def item(self, name: str, av: Any, icase: bool) -> _Frag:
        if name in _CHARS:
            return self.position(item_chars(name, av, icase))
        if name == "SUBPATTERN":
            _, add, remove, body = av
            return self.seq(body, (icase or bool(add & re.I)) and not remove & re.I)
        if name == "BRANCH":
            return self.alternatives(av[1], icase)
        if name == "GROUPREF_EXISTS":
            return self.alternatives(av[1:], icase)
        if name in _LOOPS or name == "POSSESSIVE_REPEAT":
            return self.repeat(name, av, icase)
        if name in ("ASSERT", "ASSERT_NOT"):
            self.seq(av[1], icase)  # its own loops are checked; it consumes nothing here
            return _EPSILON
        if name == "ATOMIC_GROUP":
            return self.seq(av, icase)
        if name == "AT":
            return _EPSILON
        return self.position(ALL, empty=1)  # a back reference, or anything unforeseen

    def repeat(self, name: str, av: Any, icase: bool) -> _Frag:
        low, high, body = av
        if high == 0:
            return _EPSILON
        start = len(self.chars)
        frag = self.seq(body, icase)
        if high > 1 and low == high and (len(self.chars) - start) * high <= _EXPAND_POSITIONS:
            for _ in range(high - 1):  # exact count: unrolled, so no loop edge is invented
                frag = self.then(frag, self.seq(body, icase))
        elif high > 1:
            self.link(frag.last, frag.first)
        if high > 1 and name != "POSSESSIVE_REPEAT":
            self.check(id(av), frag, start)
            self.loops.append((id(av), start, len(self.chars)))
        empty = frag.empty + (1 if low == 0 else 0)
        return _Frag(min(2, empty), frag.first, frag.last)

    def check(self, repeat: int, frag: _Frag, start: int) -> None:
        """Record the first repetition found ambiguous (inner ones come first)."""
        if self.problem is not None:
            return
        self.spend(len(self.chars) - start)
        if frag.empty:
            self.problem = (repeat, EMPTY_BODY)
        elif not self._deterministic(frag.first) or not all(
                self._deterministic(self.follow[p]) for p in range(start, len(self.chars))):
            self.problem = (repeat, AMBIGUOUS_BODY)

    def _deterministic(self, successors: Counts) -> bool:
        if any(n > 1 for n in successors.values()):
            return False
        return not overlap([self.chars[q] for q in successors])


    def chars_of(self, start: int, end: int) -> Intervals:
        return _normal_union(self.chars[start:end])

    def reach(self, start: int, end: int, chars: Intervals) -> set[int]:
        """Positions reachable from ``[start, end)`` through positions that may read ``chars``."""
        seen: set[int] = set()
        todo = list(range(start, end))
        while todo:
            successors = self.follow[todo.pop()]
            self.spend(len(successors))
            for q in successors:
                if q not in seen and overlap([self.chars[q], chars]):
                    seen.add(q)
                    todo.append(q)
        return seen

    def chain(self) -> tuple[int, str] | None:
        """The loop that ends a chain of :data:`MAX_CHAIN` + 1 loops able to share text, if any.

        ``.*a.*a.*b`` on n characters tries about n**3 splits at each start: loops in a
        row that can all read the same characters multiply.  Loop j follows loop i when
        it starts after i ends and can be reached from i through characters both read.
        """
        loops = sorted(self.loops, key=lambda loop: loop[1])
        chars = [self.chars_of(start, end) for _, start, end in loops]
        inside: dict[int, list[int]] = {}  # position -> the loops (indexes) holding it
        for k, (_, start, end) in enumerate(loops):
            for pos in range(start, end):
                inside.setdefault(pos, []).append(k)
        longest = [1] * len(loops)
        for i, (_, start, end) in enumerate(loops):
            later = {j for q in self.reach(start, end, chars[i]) for j in inside.get(q, ())
                     if loops[j][1] >= end}
            for j in later:
                if overlap([chars[i], chars[j]]) and longest[i] + 1 > longest[j]:
                    longest[j] = longest[i] + 1
                    if longest[j] > MAX_CHAIN:
                        return loops[j][0], CHAINED_LOOPS
        return None


def _normal_union(sets: list[Intervals]) -> Intervals:
    return normal([span for chars in sets for span in chars])


def ambiguous_repeat(parsed: Any) -> tuple[int, str] | None:
    """``(id of the offending repeat's arguments, why)`` for a parsed pattern, or None.

    ``parsed`` is ``re._parser.parse(pattern)``; the id names the ``(min, max, body)``
    tuple of the innermost-first, leftmost repetition found ambiguous.
    """
    automaton = _Automaton()
    icase = bool(parsed.state.flags & re.I)
    automaton.seq(parsed, icase)
    return automaton.problem or automaton.chain()
