"""MIL, the MESSIAHS Interface Language: Legion's resource-collection queries.

>>> q = compile_query('$procs >= 4 and match($arch, "x86")')
>>> q({"procs": 8, "arch": "x86_64"}), q({"procs": 2, "arch": "x86_64"})
(True, False)

Language (seed 000): boolean constants (``true``/``TRUE``/``True``, likewise false),
``and or xor not``, comparisons ``== != <> < > <= >=``, ``match(subject, "regex")``,
arithmetic ``+ - * / mod``, unary ``-`` and ``~``, ``max min int float``, parentheses,
decimal, octal (leading ``0``), hexadecimal (``0x``) and float constants, double-quoted
strings (escapes ``\\" \\\\ \\n \\t \\r``; any other backslash is kept, for regexes)
and ``$name`` variables bound to resource attributes.  Precedence, loosest first:
``or`` < ``xor`` < ``and`` < ``not`` < comparisons (not chainable) < ``+ -`` <
``* / mod`` < unary ``- ~``.  Queries nest at most :data:`MAX_DEPTH` levels (chains
of ``and``/``or``/``xor`` are flat and may be any length) and are at most
:data:`MAX_LENGTH` characters long.

Semantics
---------
Values are booleans, numbers (``int``/``float``), strings and, from attributes only,
sequences of strings (``tuple``/``list``/``set``/``frozenset``, e.g. node features).
Booleans are not numbers.  Integer ``/`` truncates toward zero and ``mod`` takes the
dividend's sign (as in C); mixing in a float gives a float.  ``match`` searches
anywhere in the subject (Python ``re``, like POSIX ``regexec``); on a sequence it is
true if any item matches.  Patterns are constants, vetted for exponential backtracking.

**Missing attributes and type mismatches evaluate to UNKNOWN**, and logic is
three-valued (Kleene): ``false and UNKNOWN`` is false, ``true or UNKNOWN`` is true,
``not UNKNOWN`` is UNKNOWN.  A node matches only when the whole query is TRUE, so a
node lacking ``$gpus`` matches neither ``$gpus > 0`` nor ``not ($gpus > 0)``.
UNKNOWN arises from: a missing attribute or one set to ``None``; an attribute of an
unsupported type (anything but bool, exact int, float, str or a sequence of strings)
or a NaN; operands of the wrong kind for the operator (``$arch > 3`` with a string
arch, ``==`` between different kinds included); division or ``mod`` by zero; an
overflow or NaN result; ``int()``/``float()`` of text that is not a number.

Mismatches visible without data (``"x86" + 1``, ``$a and 4``, ``true < false``, a
query that is not a true/false expression) are refused at compile time with a
:class:`MILError` pointing at the offending operand.  ``q.evaluate(attrs)`` and
:func:`evaluate` return the raw value with UNKNOWN as ``None``.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Protocol, runtime_checkable

from .compiler import build
from .errors import MILError
from .interp import evaluate as _interpret
from .nodes import Node, depth, variables
from .parser import MAX_DEPTH, MAX_LENGTH, parse
from .typecheck import check
from .unparse import unparse

__all__ = ["CompiledQuery", "MAX_DEPTH", "MAX_LENGTH", "MILError", "compile_query", "evaluate", "parse",
           "unparse"]


@runtime_checkable
class CompiledQuery(Protocol):
    """A compiled query: ``q(attrs) -> bool`` plus a few descriptive attributes.

    :func:`compile_query` returns the generated Python function itself, carrying these
    attributes, rather than an object wrapping it: a wrapper's ``__call__`` would cost
    a second call per evaluation, about a third of the whole budget.
    """

    text: str
    tree: Node
    variables: frozenset[str]
    python_source: str
    evaluate: Callable[[Mapping[str, object]], Any]

    def __call__(self, attrs: Mapping[str, object]) -> bool:
        """True when the query is TRUE for ``attrs`` (False for FALSE or UNKNOWN)."""


def _tree_of(query: str | bytes | Node, source: str) -> tuple[Node, str | None]:
    if isinstance(query, Node):
        if depth(query) > MAX_DEPTH:
            raise MILError(f"query is nested more than {MAX_DEPTH} levels deep", source=source)
        return query, None
    tree = parse(query, source=source)
    text = query if isinstance(query, str) else bytes(query).decode("utf-8")
    return tree, text


def compile_query(query: str | bytes | Node, *, source: str = "<query>") -> CompiledQuery:
    """Parse, type-check and compile a MIL query (text or tree) into a fast predicate."""
    tree, text = _tree_of(query, source)
    kind = check(tree, text=text, source=source)
    if kind not in ("bool", "any"):
        raise MILError("a query must be a true/false expression (a comparison, match(), ...)",
                       source=source, line=tree.line or None, column=tree.column or None,
                       text=text)
    predicate, value, python_source = build(tree)
    fn: Any = predicate
    fn.text = text if text is not None else unparse(tree)
    fn.tree = tree
    fn.variables = variables(tree)
    fn.python_source = python_source
    fn.evaluate = value
    fn.__doc__ = f"MIL query: {fn.text}"
    return fn


def evaluate(query: str | bytes | Node, attrs: Mapping[str, object]) -> Any:
    """Interpret a query (text or tree) against ``attrs``: the reference semantics.

    Unlike :func:`compile_query` it does not type-check; ill-typed parts are UNKNOWN.
    Returns True/False, a number or string, or ``None`` for UNKNOWN.
    """
    tree, _ = _tree_of(query, "<query>")
    if not callable(getattr(attrs, "get", None)):
        raise MILError(f"attributes must be a mapping with .get(), not {type(attrs).__name__}")
    return _interpret(tree, attrs)
