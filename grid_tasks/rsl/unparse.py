"""Write a syntax tree back as RSL text that parses to an equal tree."""

from __future__ import annotations

from grid_tasks.rsl.ast import Boolean, Concat, Literal, Relation, Sequence, Spec, Value, Variable
from grid_tasks.rsl.lexer import is_unquoted_literal


def quote(value: str) -> str:
    """``value`` as an RSL literal: bare when safe, else double-quoted with ``""`` escapes."""
    if is_unquoted_literal(value):
        return value
    return '"' + value.replace('"', '""') + '"'


def unparse_value(value: Value) -> str:
    """One value as RSL text."""
    if isinstance(value, Literal):
        return quote(value.value)
    if isinstance(value, Variable):
        if value.default is None:
            return f"$({quote(value.name)})"
        return f"$({quote(value.name)} {unparse_value(value.default)})"
    if isinstance(value, Concat):
        # explicit '#' always: implicit concatenation depends on spacing
        return " # ".join(unparse_value(part) for part in value.parts)
    if isinstance(value, Sequence):
        return "(" + " ".join(unparse_value(item) for item in value.items) + ")"
    raise TypeError(f"not an RSL value: {value!r}")


def _relation(rel: Relation) -> str:
    values = " ".join(unparse_value(v) for v in rel.values)
    return f"{quote(rel.attribute)} {rel.op.value} {values}"


def unparse(spec: Spec) -> str:
    """RSL text for ``spec``; ``parse(unparse(spec)) == spec`` for every tree."""
    if isinstance(spec, Relation):
        return _relation(spec)
    if isinstance(spec, Boolean):
        return spec.op.value + "".join(f"({unparse(operand)})" for operand in spec.operands)
    raise TypeError(f"not an RSL specification: {spec!r}")
