"""GRAM validation of job requests (and DUROC multi-requests).

A request is either one job (a conjunction ``&(...)(...)`` or a lone
relation) or a DUROC multi-request ``+(&...)(&...)`` whose components are
jobs.  Each job must use only ``=`` relations on known attributes, each at
most once, with well-formed values, and must name an executable.  Which GRAM
protocol error each mistake earns follows the Globus job manager.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from grid_tasks.rsl.ast import Boolean, BoolOp, Relation, RelOp, Spec
from grid_tasks.rsl.attributes import Rule, rule_for
from grid_tasks.rsl.errors import GramError, RSLError
from grid_tasks.rsl.evaluate import DEFAULT_MAX_SUBSTITUTION, SUBSTITUTION_KEY, evaluate
from grid_tasks.rsl.parser import parse


@dataclass(frozen=True)
class CheckedJob:
    """One validated job: its (evaluated) relations and typed attribute values."""

    spec: Spec
    relations: tuple[Relation, ...]
    values: Mapping[str, Any]  # canonical key -> typed value
    rules: Mapping[str, Rule]  # canonical key -> the rule that checked it


def _bad(message: str, node: Spec, code: GramError = GramError.BAD_RSL) -> RSLError:
    return RSLError(message, code=code, line=node.line, column=node.column)


def components(spec: Spec) -> list[Spec]:
    """The job specifications of a request: one, or one per multi-request component."""
    if isinstance(spec, Relation) or spec.op is BoolOp.AND:
        return [spec]
    if spec.op is BoolOp.OR:
        raise _bad("a disjunction '|' cannot be submitted: GRAM needs one definite job", spec)
    jobs = []
    for operand in spec.operands:
        if isinstance(operand, Relation) and operand.key == SUBSTITUTION_KEY:
            continue  # shared definitions; evaluation already applied them
        if isinstance(operand, Boolean) and operand.op is not BoolOp.AND:
            kind = "nested multi-request" if operand.op is BoolOp.MULTI else "disjunction"
            raise _bad(f"a multi-request component must be a job conjunction, not a {kind}", operand)
        jobs.append(operand)
    if not jobs:
        raise _bad("multi-request has no subjob", spec)
    return jobs


def _relations(job: Spec) -> tuple[Relation, ...]:
    if isinstance(job, Relation):
        return (job,)
    for operand in job.operands:
        if not isinstance(operand, Relation):
            raise _bad("a job request may contain only relations, not a nested specification", operand)
    return job.operands  # type: ignore[return-value]


def check_job(job: Spec) -> CheckedJob:
    """Validate one evaluated job specification."""
    relations = _relations(job)
    values: dict[str, Any] = {}
    rules: dict[str, Rule] = {}
    for rel in relations:
        if rel.op is not RelOp.EQ:
            raise _bad(f"{rel.attribute}: a job request allows only '=' relations, not {rel.op.value!r}", rel)
        rule = rule_for(rel.key)
        if rule is None:
            raise RSLError(
                f"unknown RSL attribute {rel.attribute!r}",
                code=GramError.PARAMETER_NOT_SUPPORTED,
                key=rel.attribute,
                line=rel.line,
                column=rel.column,
            )
        if rel.key in rules and rel.key != SUBSTITUTION_KEY:
            raise rule.shape("given more than once", rel)
        values[rel.key] = rule.check(rel)
        rules[rel.key] = rule
    if "executable" not in values:
        raise _bad("the job names no executable", job, GramError.UNDEFINED_EXE)
    return CheckedJob(job, relations, values, rules)


def check(spec: Spec, variables: Mapping[str, str] | None = None, *,
          max_substitution: int = DEFAULT_MAX_SUBSTITUTION) -> tuple[Spec, list[CheckedJob]]:
    """Evaluate ``spec`` (output budget ``max_substitution`` bytes, see :func:`evaluate`);
    return the evaluated tree and its validated jobs, in order."""
    evaluated = evaluate(spec, variables, max_substitution=max_substitution)
    return evaluated, [check_job(job) for job in components(evaluated)]


def as_spec(request: str | bytes | Spec, source: str = "<string>") -> tuple[Spec, str | None]:
    """The tree of a request given as text or tree, and its text when known."""
    if isinstance(request, bytes):
        spec = parse(request, source=source)
        return spec, request.decode("utf-8")
    if isinstance(request, str):
        return parse(request, source=source), request
    return request, None


def validate(
    request: str | bytes | Spec,
    variables: Mapping[str, str] | None = None,
    *,
    source: str = "<string>",
    max_substitution: int = DEFAULT_MAX_SUBSTITUTION,
) -> Spec:
    """Parse (if text), evaluate and GRAM-validate a job request or multi-request.

    ``max_substitution`` bounds the bytes substitution may produce (see
    :mod:`grid_tasks.rsl.evaluate`).  Returns the evaluated tree.  Raises :class:`RSLError` whose ``code`` is the
    GRAM protocol error name and whose line/column point at the culprit.
    """
    spec, text = as_spec(request, source)
    try:
        return check(spec, variables, max_substitution=max_substitution)[0]
    except RSLError as exc:
        raise exc.with_text(text, source) from None
