"""RSL substitution: resolve ``$(NAME)`` references and ``#`` concatenations.

Semantics follow the Globus evaluator: every boolean specification opens a
scope; its operands are visited in order; an ``rsl_substitution`` relation
binds its ``(NAME value)`` pairs in the current scope, one after the other, so
a definition may use the ones before it (and any outer or caller-supplied
variable).  A relation only sees definitions that precede it.  Caller
variables (the standard GRAM set: HOME, LOGNAME, GLOBUS_LOCATION, ...) form
the outermost scope.  Names are case-sensitive.  A reference to an undefined
name without a default fails with ``RSL_EVALUATION_FAILED``.
"""

from __future__ import annotations

from collections import ChainMap
from typing import Mapping, MutableMapping

from grid_tasks.rsl.ast import Boolean, Concat, Literal, Relation, Sequence, Spec, Value, Variable
from grid_tasks.rsl.errors import GramError, RSLError

SUBSTITUTION_KEY = "rslsubstitution"

#: The variables a GRAM job manager defines for every job (values come from the caller).
STANDARD_VARIABLES = (
    "HOME",
    "LOGNAME",
    "GLOBUS_ID",
    "GLOBUS_LOCATION",
    "GLOBUS_HOST_MANUFACTURER",
    "GLOBUS_HOST_CPUTYPE",
    "GLOBUS_HOST_OSNAME",
    "GLOBUS_HOST_OSVERSION",
    "GLOBUS_GASS_CACHE_DEFAULT",
    "GLOBUS_SCRATCH_DIR",
    "SCRATCH_DIRECTORY",
)

Scope = MutableMapping[str, str]


def _fail(message: str, node: Value | Relation, key: str | None = None) -> RSLError:
    return RSLError(
        message, code=GramError.RSL_EVALUATION_FAILED, line=node.line, column=node.column, key=key
    )


def _string(value: Value, scope: Scope) -> str:
    """The string a simple value evaluates to."""
    if isinstance(value, Literal):
        return value.value
    if isinstance(value, Variable):
        found = scope.get(value.name)
        if found is not None:
            return found
        if value.default is not None:
            return _string(value.default, scope)
        raise _fail(f"undefined RSL variable $({value.name})", value, key=value.name)
    if isinstance(value, Concat):
        return "".join(_string(part, scope) for part in value.parts)
    raise _fail("a sequence cannot be used where a single string is expected", value)


def evaluate_value(value: Value, scope: Scope) -> Value:
    """``value`` with every reference and concatenation replaced by a literal."""
    if isinstance(value, Sequence):
        return Sequence(tuple(evaluate_value(v, scope) for v in value.items), value.line, value.column)
    if isinstance(value, Literal):
        return value
    return Literal(_string(value, scope), value.line, value.column)


def _bind(rel: Relation, scope: Scope) -> Relation:
    """Apply an rsl_substitution relation to ``scope``; return it evaluated."""
    pairs = []
    for pair in rel.values:
        if not (isinstance(pair, Sequence) and len(pair.items) == 2):
            raise _fail("rsl_substitution takes (NAME value) pairs", pair, key=rel.attribute)
        name_node, value_node = pair.items
        if isinstance(value_node, Sequence):
            raise _fail("an rsl_substitution value must be a single string", value_node, key=rel.attribute)
        name = _string(name_node, scope)
        value = _string(value_node, scope)
        scope[name] = value
        pairs.append(
            Sequence(
                (Literal(name, name_node.line, name_node.column), Literal(value, value_node.line, value_node.column)),
                pair.line,
                pair.column,
            )
        )
    return Relation(rel.attribute, rel.op, tuple(pairs), rel.line, rel.column)


def _evaluate(spec: Spec, scope: ChainMap[str, str]) -> Spec:
    if isinstance(spec, Boolean):
        inner = scope.new_child()
        return Boolean(spec.op, tuple(_evaluate(op, inner) for op in spec.operands), spec.line, spec.column)
    if spec.key == SUBSTITUTION_KEY:
        return _bind(spec, scope)
    values = tuple(evaluate_value(v, scope) for v in spec.values)
    return Relation(spec.attribute, spec.op, values, spec.line, spec.column)


def evaluate(spec: Spec, variables: Mapping[str, str] | None = None) -> Spec:
    """The tree with all substitutions applied (only literals and sequences remain).

    ``variables`` are the caller's standard GRAM variables (see
    :data:`STANDARD_VARIABLES`).  Raises :class:`RSLError`
    (``RSL_EVALUATION_FAILED``) for an undefined variable or a malformed
    ``rsl_substitution``.
    """
    outer: ChainMap[str, str] = ChainMap({}, dict(variables or {}))
    return _evaluate(spec, outer)
