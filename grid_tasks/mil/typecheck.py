"""Static type check: refuse queries that mix kinds in a way no attribute can rescue.

Constants have known kinds; ``$variables`` can be anything until evaluation.  An
operand whose kind is *known* to be wrong (``"x86" + 1``, ``$procs and 4``,
``not 3``, ``true < false``, ``2.5 mod ~1.0``) is a :class:`MILError` pointing at
that operand.  Mismatches that only the data can reveal are left to evaluation,
where they make the comparison unknown (see the package docstring).
"""

from __future__ import annotations

from .errors import MILError
from .nodes import Binary, Bool, BoolOp, Call, Float, Int, Match, Node, Str, Unary, Var, children

# Kinds: "bool", "int", "float", "num" (int or float), "str", "any" (unknown).
_NUMERIC = {"int", "float", "num"}
_NAMES = {"bool": "a boolean", "int": "an integer", "float": "a float", "num": "a number",
          "str": "a string"}


class _Checker:
    def __init__(self, text: str | None, source: str) -> None:
        self.text = text
        self.source = source
        self.kinds: dict[int, str] = {}

    def fail(self, node: Node, message: str) -> MILError:
        return MILError(message, source=self.source, line=node.line or None,
                        column=node.column or None, text=self.text)

    def need(self, node: Node, allowed: set[str], what: str) -> str:
        kind = self.kinds[id(node)]
        if kind != "any" and kind not in allowed:
            raise self.fail(node, f"{what}, but this is {_NAMES[kind]}")
        return kind

    def kind_of(self, node: Node) -> str:
        if isinstance(node, Bool):
            return "bool"
        if isinstance(node, Int):
            return "int"
        if isinstance(node, Float):
            return "float"
        if isinstance(node, Str):
            return "str"
        if isinstance(node, Var):
            return "any"
        if isinstance(node, BoolOp):
            for item in node.operands:
                self.need(item, {"bool"}, f"'{node.op}' needs true/false operands")
            return "bool"
        if isinstance(node, Unary):
            return self.unary(node)
        if isinstance(node, Binary):
            return self.binary(node)
        if isinstance(node, Match):
            self.need(node.subject, {"str"}, "match() searches a string")
            return "bool"
        if isinstance(node, Call):
            return self.call(node)
        raise MILError(f"not a MIL node: {type(node).__name__}", source=self.source)

    def unary(self, node: Unary) -> str:
        if node.op == "not":
            self.need(node.operand, {"bool"}, "'not' needs a true/false operand")
            return "bool"
        if node.op == "~":
            self.need(node.operand, {"int", "num"}, "'~' needs an integer")
            return "int"
        return self.need(node.operand, _NUMERIC, "unary '-' needs a number")

    def binary(self, node: Binary) -> str:
        left, right = self.kinds[id(node.left)], self.kinds[id(node.right)]
        if node.op in ("==", "!=", "<", ">", "<=", ">="):
            return self.comparison(node, left, right)
        what = f"'{node.op}' needs numbers"
        left = self.need(node.left, _NUMERIC, what)
        right = self.need(node.right, _NUMERIC, what)
        if node.op in ("/", "mod") and isinstance(node.right, (Int, Float)) \
                and node.right.value == 0:
            raise self.fail(node.right, f"'{node.op}' by zero")
        if left == right and left in ("int", "float"):
            return left
        return "float" if "float" in (left, right) else "num"

    def comparison(self, node: Binary, left: str, right: str) -> str:
        if "bool" in (left, right) and node.op not in ("==", "!="):
            culprit = node.left if left == "bool" else node.right
            raise self.fail(culprit, f"'{node.op}' cannot order true/false values")
        family = {k: ("num" if k in _NUMERIC else k) for k in (left, right)}
        if "any" not in (left, right) and family[left] != family[right]:
            raise self.fail(node, f"'{node.op}' compares {_NAMES[left]} with {_NAMES[right]}")
        return "bool"

    def call(self, node: Call) -> str:
        if node.func in ("int", "float"):
            return node.func
        kinds = [self.kinds[id(arg)] for arg in node.args]
        for arg, kind in zip(node.args, kinds):
            if kind == "bool":
                raise self.fail(arg, f"{node.func}() needs numbers or strings")
        known = {("num" if k in _NUMERIC else k) for k in kinds if k != "any"}
        if len(known) > 1:
            raise self.fail(node, f"{node.func}() mixes a number and a string")
        if "any" in kinds:
            return "any"
        if kinds[0] == kinds[1]:
            return kinds[0]
        return "float" if "float" in kinds else "num"


def check(tree: Node, *, text: str | None = None, source: str = "<query>") -> str:
    """Raise :class:`MILError` on a statically ill-typed tree; return the root's kind.

    Walks bottom-up without recursion, so any tree the parser accepts can be checked.
    """
    checker = _Checker(text, source)
    order: list[Node] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(children(node))
    for node in reversed(order):
        checker.kinds[id(node)] = checker.kind_of(node)
    return checker.kinds[id(tree)]
