"""Compile a MIL tree once into plain Python functions, then evaluate many times.

Two functions are generated from the tree:

* ``mil_query(attrs) -> bool``: is the query TRUE for these attributes?  Three-valued
  logic is compiled away by generating, for each node, the expression for "this node
  is TRUE" or "this node is FALSE" (``not`` swaps the two; ``and``/``or`` keep Python's
  short-circuit).  Comparisons of an attribute with a constant, the common case, become
  one inline type test plus the comparison, close to what one would write by hand.

  The body exists twice.  The *fast* copy runs when ``attrs`` is a plain ``dict``: it
  subscripts (``a['procs']``) and compares first, checking the exact type only when the
  comparison holds, so it can only answer True when the exact answer is TRUE and only
  False when it is not.  Anything unusual (a missing key, a string compared with a
  number) raises inside it, and the *exact* copy, which never raises and never calls a
  method of an attribute value, answers instead.
* ``mil_value(attrs)``: the raw three-valued result, through :mod:`runtime` helpers.

Safety: no text of the query reaches the generated source except through ``repr`` of
a ``str``/``int``/``float``/``bool`` constant or an identifier-shaped attribute name;
other constants and every compiled regular expression are passed in as globals.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Mapping

from . import runtime
from .errors import MILError
from .nodes import Binary, Bool, BoolOp, Call, Float, Int, Match, Node, Str, Unary, Var
from .regex import compile_pattern

_FLIP = {"==": "==", "!=": "!=", "<": ">", ">": "<", "<=": ">=", ">=": "<="}
_NEGATE = {"==": "!=", "!=": "==", "<": ">=", ">": "<=", "<=": ">", ">=": "<"}
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HELPERS: dict[str, Any] = {
    "_val": runtime.val, "_match": runtime.match, "_NUM": frozenset((int, float)),
    "_and": runtime.and_, "_or": runtime.or_, "_xor": runtime.xor,
    "_not": runtime.not_, "_neg": runtime.neg, "_inv": runtime.inv,
    **{f"_a{i}": fn for i, fn in enumerate(runtime.ARITH.values())},
    **{f"_c{i}": fn for i, fn in enumerate(runtime.COMPARE.values())},
    "_max": runtime.max_, "_min": runtime.min_, "_int": runtime.to_int,
    "_float": runtime.to_float,
}
_ARITH_NAMES = {op: f"_a{i}" for i, op in enumerate(runtime.ARITH)}
_COMPARE_NAMES = {op: f"_c{i}" for i, op in enumerate(runtime.COMPARE)}
_UNARY_NAMES = {"not": "_not", "-": "_neg", "~": "_inv"}


def _is_const(node: Node) -> bool:
    return isinstance(node, (Bool, Int, Float, Str))


def _folded(node: Node) -> Node:
    """``-3`` is ``Unary('-', Int(3))`` in the tree; comparisons want the constant -3."""
    if isinstance(node, Unary) and node.op == "-" and isinstance(node.operand, (Int, Float)):
        operand = node.operand
        return type(operand)(-operand.value)
    return node


def _bad_attrs(attrs: object) -> MILError:
    return MILError(f"attributes must be a mapping with .get(), not {type(attrs).__name__}")


class _Codegen:
    """Turns a checked tree into Python source plus the globals that source needs."""

    def __init__(self) -> None:
        self.globals: dict[str, Any] = dict(_HELPERS)
        self._count = 0
        self.fast = False  # generating the optimistic dict-only copy

    def get(self, name: str) -> str:
        key = self.key(name)
        return f"a[{key}]" if self.fast else f"a.get({key})"

    def _fresh(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def bind(self, value: Any) -> str:
        name = self._fresh("_k")
        self.globals[name] = value
        return name

    def key(self, name: str) -> str:
        if not _IDENT.fullmatch(name):
            raise MILError(f"invalid attribute name {name!r}")
        return repr(name)

    def literal(self, value: Any) -> str:
        if type(value) is bool or type(value) is str:
            return repr(value)
        if type(value) is int and abs(value) < 10**18:
            return repr(value)
        if type(value) is float and math.isfinite(value):
            return repr(value)
        return self.bind(value)

    def truth(self, node: Node, want: bool) -> str:
        """Python expression, a real bool, true exactly when ``node`` evaluates to ``want``."""
        if isinstance(node, Bool):
            return repr(node.value is want)
        if isinstance(node, Var):
            return f"({self.get(node.name)} is {want})"
        if isinstance(node, BoolOp) and node.op != "xor":
            joiner = " and " if (node.op == "and") == want else " or "
            return "(" + joiner.join(self.truth(item, want) for item in node.operands) + ")"
        if isinstance(node, Unary) and node.op == "not":
            return self.truth(node.operand, not want)
        if isinstance(node, Binary) and node.op in _COMPARE_NAMES:
            return self.compare_truth(node, want)
        if isinstance(node, Match) and isinstance(node.subject, Var):
            return self.match_truth(node, want)
        return f"({self.value(node)} is {want})"

    def compare_truth(self, node: Binary, want: bool) -> str:
        op, left, right = node.op, _folded(node.left), _folded(node.right)
        if isinstance(right, Var) and _is_const(left):
            left, right, op = right, left, _FLIP[op]
        if not (isinstance(left, Var) and _is_const(right)):
            return f"({self.value(node)} is {want})"
        op = op if want else _NEGATE[op]
        constant = right.value  # type: ignore[attr-defined]
        get = self.get(left.name)
        if type(constant) is bool:
            if op not in ("==", "!="):
                return "False"
            return f"({get} is {(constant if op == '==' else not constant)!r})"
        tmp, kind = self._fresh("v"), self._fresh("t")
        lit = self.literal(constant)
        if type(constant) is str:
            if self.fast:
                return f"(({tmp} := {get}) {op} {lit} and type({tmp}) is str)"
            return f"(type({tmp} := {get}) is str and {tmp} {op} {lit})"
        # A NaN attribute must fail both polarities, so '!=' is spelt as '<' or '>'.
        if self.fast:
            first = f"({tmp} := {get})"
            test = f"({first} < {lit} or {tmp} > {lit})" if op == "!=" else f"{first} {op} {lit}"
            return f"({test} and (({kind} := type({tmp})) is int or {kind} is float))"
        test = f"({tmp} < {lit} or {tmp} > {lit})" if op == "!=" else f"{tmp} {op} {lit}"
        return f"((({kind} := type({tmp} := {get})) is int or {kind} is float) and {test})"

    def match_truth(self, node: Match, want: bool) -> str:
        search = self.bind(self.regex(node.pattern).search)
        tmp = self._fresh("v")
        hit = "is not None" if want else "is None"
        get = self.get(node.subject.name)  # type: ignore[union-attr]
        return (f"(({search}({tmp}) {hit}) if type({tmp} := {get})"
                f" is str else (_match({search}, {tmp}) is {want}))")

    def regex(self, pattern: str) -> re.Pattern[str]:
        vetted = compile_pattern(pattern)
        if vetted.regex is None:
            raise MILError(vetted.problem or "invalid regular expression")
        return vetted.regex

    def value(self, node: Node) -> str:
        """Python expression computing the three-valued value of ``node``."""
        if _is_const(node):
            return self.literal(node.value)  # type: ignore[attr-defined]
        if isinstance(node, Var):
            return f"_val(a.get({self.key(node.name)}))"
        if isinstance(node, BoolOp):
            return f"_{node.op}({', '.join(self.value(item) for item in node.operands)})"
        if isinstance(node, Unary):
            return f"{_UNARY_NAMES[node.op]}({self.value(node.operand)})"
        if isinstance(node, Binary):
            fn = _ARITH_NAMES.get(node.op) or _COMPARE_NAMES[node.op]
            return f"{fn}({self.value(node.left)}, {self.value(node.right)})"
        if isinstance(node, Match):
            search = self.bind(self.regex(node.pattern).search)
            return f"_match({search}, {self.value(node.subject)})"
        if isinstance(node, Call):
            return f"_{node.func}({', '.join(self.value(arg) for arg in node.args)})"
        raise MILError(f"not a MIL node: {type(node).__name__}")


def generate(tree: Node) -> tuple[str, dict[str, Any]]:
    """Python source defining ``mil_query`` and ``mil_value``, and its globals."""
    gen = _Codegen()
    exact = gen.truth(tree, True)
    gen.fast = True
    fast = gen.truth(tree, True)
    gen.fast = False
    source = (f"def mil_query(a):\n"
              f"    if type(a) is dict:\n"
              f"        try:\n"
              f"            return {fast}\n"
              f"        except Exception:\n"
              f"            pass  # the exact copy below decides\n"
              f"    try:\n"
              f"        return {exact}\n"
              f"    except AttributeError:\n"
              f"        raise _bad_attrs(a) from None  # only a.get() can be missing\n\n"
              f"def mil_value(a):\n"
              f"    try:\n"
              f"        return {gen.value(tree)}\n"
              f"    except AttributeError:\n"
              f"        raise _bad_attrs(a) from None\n")
    gen.globals["_bad_attrs"] = _bad_attrs
    gen.globals["__builtins__"] = {"type": type, "str": str, "int": int, "float": float,
                                   "dict": dict, "Exception": Exception,
                                   "AttributeError": AttributeError}
    return source, gen.globals


def build(tree: Node) -> tuple[Callable[[Mapping[str, object]], bool],
                               Callable[[Mapping[str, object]], Any], str]:
    """Compile ``tree`` (already parsed and type-checked) to its two functions."""
    source, namespace = generate(tree)
    try:
        code = compile(source, "<mil>", "exec")
    except (SyntaxError, RecursionError, MemoryError) as exc:
        raise MILError(f"query is too large to compile ({exc})") from None
    exec(code, namespace)  # noqa: S102 - source built from the tree, see module docstring
    return namespace["mil_query"], namespace["mil_value"], source
