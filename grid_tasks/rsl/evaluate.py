"""RSL substitution: resolve ``$(NAME)`` references and ``#`` concatenations.

Semantics follow the Globus evaluator: every boolean specification opens a
scope; its operands are visited in order; an ``rsl_substitution`` relation
binds its ``(NAME value)`` pairs in the current scope, one after the other, so
a definition may use the ones before it (and any outer or caller-supplied
variable).  A relation only sees definitions that precede it.  Caller
variables (the standard GRAM set: HOME, LOGNAME, GLOBUS_LOCATION, ...) form
the outermost scope.  Names are case-sensitive.  A reference to an undefined
name fails with ``RSL_EVALUATION_FAILED``, and so does a reference with a
default value (``$(NAME default)``): the grammar reads it, GRAM's evaluator
refuses it.

Some variables only the job manager knows (:data:`JOB_MANAGER_VARIABLES`: the
mapped account's HOME and LOGNAME, the job's contact...): they are evaluated
where the gatekeeper maps the submitter.  A check made before that (the client,
``rsl check``) passes :func:`deferred_variables`, stand-ins that keep them
defined, so that check and submission agree.

Output is bounded, because a few hundred bytes of definitions that each double
the one before would otherwise make gigabytes.  One evaluation has a budget of
``max_substitution`` bytes (UTF-8, :data:`DEFAULT_MAX_SUBSTITUTION` = 1 MiB by
default): every value that evaluation *produces* -- a relation value or an
``rsl_substitution`` name or value written as a reference or a concatenation --
is charged its size, once per place it appears.  Values written as plain
literals are free (the request's own size bounds them), and so is defining the
caller's variables (using them is charged like any reference).  A concatenation is sized before it is built, so a doubling chain
stops at the first value that would cross the budget, without building it; the
``RSL_EVALUATION_FAILED`` error points at that value.
"""

from __future__ import annotations

from collections import ChainMap
from typing import Mapping, MutableMapping

from grid_tasks.limits import DEFAULT_MAX_SUBSTITUTION
from grid_tasks.rsl.ast import Boolean, Concat, Literal, Relation, Sequence, Spec, Value, Variable
from grid_tasks.rsl.errors import GramError, RSLError

SUBSTITUTION_KEY = "rslsubstitution"

#: The default budget of one evaluation, in bytes (the ``GRID_TASKS_RSL_MAX_SUBSTITUTION`` setting).

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

#: The variables a job manager defines from the job and the account it maps the
#: submitter to (GRAM's job manager request: HOME and LOGNAME of that account, the
#: job's contact, the gatekeeper's host, port and subject, the job's cached output).
JOB_MANAGER_VARIABLES = (
    "HOME",
    "LOGNAME",
    "GLOBUS_GRAM_JOB_CONTACT",
    "GLOBUS_GATEKEEPER_HOST",
    "GLOBUS_GATEKEEPER_PORT",
    "GLOBUS_GATEKEEPER_SUBJECT",
    "GLOBUS_CACHED_STDOUT",
    "GLOBUS_CACHED_STDERR",
)

Scope = MutableMapping[str, str]


def deferred_variables(names: tuple[str, ...] = JOB_MANAGER_VARIABLES) -> dict[str, str]:
    """Stand-ins for variables only the job manager defines: each is the text
    ``$(NAME)``, so a check before submission finds it defined and shows where its
    value will go."""
    return {name: f"$({name})" for name in names}


def _fail(message: str, node: Value | Relation, key: str | None = None) -> RSLError:
    return RSLError(
        message, code=GramError.RSL_EVALUATION_FAILED, line=node.line, column=node.column, key=key
    )


def _size(text: str) -> int:
    """UTF-8 size of ``text``; O(1) for ASCII, which is nearly every RSL value."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


class _Budget:
    """What is left of one evaluation's output budget (see the module docstring)."""

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError(f"max_substitution must be >= 0, not {limit!r}")
        self.limit = limit
        self.left = limit

    def check(self, size: int, node: Value) -> None:
        """Refuse, at ``node``, a value of ``size`` bytes that would not fit what is left."""
        if size > self.left:
            raise _fail(
                f"RSL substitution output over its limit of {self.limit} bytes: "
                f"{self.limit - self.left} bytes produced before this value, which needs "
                f"{size} or more (raise the limit with the setting GRID_TASKS_RSL_MAX_SUBSTITUTION, "
                "or max_substitution= in the API)",
                node,
            )

    def charge(self, size: int, node: Value) -> None:
        self.check(size, node)
        self.left -= size


def _string(value: Value, scope: Scope, budget: _Budget) -> str:
    """The string a simple value evaluates to (a concatenation is sized before it is built)."""
    if isinstance(value, Literal):
        return value.value
    if isinstance(value, Variable):
        if value.default is not None:
            raise _fail(f"$({value.name} ...) has a default value, which GRAM does not "
                        f"evaluate: define {value.name} with rsl_substitution instead",
                        value, key=value.name)
        found = scope.get(value.name)
        if found is not None:
            return found
        raise _fail(f"undefined RSL variable $({value.name})", value, key=value.name)
    if isinstance(value, Concat):
        parts = []
        size = 0
        for part in value.parts:
            text = _string(part, scope, budget)
            size += _size(text)
            budget.check(size, value)
            parts.append(text)
        return "".join(parts)
    raise _fail("a sequence cannot be used where a single string is expected", value)


def _produce(value: Value, scope: Scope, budget: _Budget) -> str:
    """The string of a simple value written in the request, charged unless a plain literal."""
    text = _string(value, scope, budget)
    if not isinstance(value, Literal):
        budget.charge(_size(text), value)
    return text


def evaluate_value(value: Value, scope: Scope, budget: _Budget) -> Value:
    """``value`` with every reference and concatenation replaced by a literal."""
    if isinstance(value, Sequence):
        return Sequence(tuple(evaluate_value(v, scope, budget) for v in value.items),
                        value.line, value.column)
    if isinstance(value, Literal):
        return value
    return Literal(_produce(value, scope, budget), value.line, value.column)


def _bind(rel: Relation, scope: Scope, budget: _Budget) -> Relation:
    """Apply an rsl_substitution relation to ``scope``; return it evaluated."""
    pairs = []
    for pair in rel.values:
        if not (isinstance(pair, Sequence) and len(pair.items) == 2):
            raise _fail("rsl_substitution takes (NAME value) pairs", pair, key=rel.attribute)
        name_node, value_node = pair.items
        if isinstance(value_node, Sequence):
            raise _fail("an rsl_substitution value must be a single string", value_node, key=rel.attribute)
        name = _produce(name_node, scope, budget)
        value = _produce(value_node, scope, budget)
        scope[name] = value
        pairs.append(
            Sequence(
                (Literal(name, name_node.line, name_node.column), Literal(value, value_node.line, value_node.column)),
                pair.line,
                pair.column,
            )
        )
    return Relation(rel.attribute, rel.op, tuple(pairs), rel.line, rel.column)


def _evaluate(spec: Spec, scope: ChainMap[str, str], budget: _Budget) -> Spec:
    if isinstance(spec, Boolean):
        inner = scope.new_child()
        operands = tuple(_evaluate(op, inner, budget) for op in spec.operands)
        return Boolean(spec.op, operands, spec.line, spec.column)
    if spec.key == SUBSTITUTION_KEY:
        return _bind(spec, scope, budget)
    values = tuple(evaluate_value(v, scope, budget) for v in spec.values)
    return Relation(spec.attribute, spec.op, values, spec.line, spec.column)


def evaluate(
    spec: Spec,
    variables: Mapping[str, str] | None = None,
    *,
    max_substitution: int = DEFAULT_MAX_SUBSTITUTION,
) -> Spec:
    """The tree with all substitutions applied (only literals and sequences remain).

    ``variables`` are the caller's standard GRAM variables (see
    :data:`STANDARD_VARIABLES`).  ``max_substitution`` is the output budget in
    bytes (see the module docstring).  Raises :class:`RSLError`
    (``RSL_EVALUATION_FAILED``) for an undefined variable, a malformed
    ``rsl_substitution`` or output over the budget.
    """
    outer: ChainMap[str, str] = ChainMap({}, dict(variables or {}))
    return _evaluate(spec, outer, _Budget(max_substitution))
