"""GRAM validation of job requests (and DUROC multi-requests).

A request is either one job (a conjunction ``&(...)(...)``) or a DUROC
multi-request ``+(&...)(&...)`` whose components are jobs; a bare relation at
the top level is not a request (GRAM: ``BAD_RSL``).  Each job must use only
``=`` relations on known attributes, each at most once, with well-formed
values, and must name an executable.  A job with ``restart`` is a restart
request: it names the job whose job manager is to be restarted and may change
only what a restart may (stdout, stderr, their positions, two_phase...).

With several mistakes in one request, the one reported is the one GRAM's job
manager reports, because it checks in phases (``request_init``): the restart
contact and the cache attribute (read before anything else, their shape only),
then evaluation, then attribute names, relations and enumerated values, then
the required executable, then count, then two_phase, then staging; every other
value after those.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Mapping

from grid_tasks.rsl.ast import Boolean, BoolOp, Literal, Relation, RelOp, Sequence, Spec
from grid_tasks.rsl.attributes import RESTART, RULES, SUBMIT, ChoiceRule, Rule, rule_for
from grid_tasks.rsl.errors import GramError, RSLError
from grid_tasks.rsl.evaluate import DEFAULT_MAX_SUBSTITUTION, SUBSTITUTION_KEY, evaluate
from grid_tasks.rsl.parser import parse

#: Read before evaluation, as GRAM reads them (the restart contact, the cache).
_EARLY = ("restart", "gasscache")
#: The phases after the required executable, in GRAM's order.
_PHASES = (("count",), ("twophase",), ("filestagein", "filestageinshared", "filestageout",
                                        "filecleanup"))


@dataclass(frozen=True)
class CheckedJob:
    """One validated job: its (evaluated) relations and typed attribute values."""

    spec: Spec
    relations: tuple[Relation, ...]
    values: Mapping[str, Any]  # canonical key -> typed value
    rules: Mapping[str, Rule]  # canonical key -> the rule that checked it

    @property
    def restart(self) -> bool:
        """Whether this is a restart request (it names a job with ``restart``)."""
        return "restart" in self.values


def _bad(message: str, node: Spec, code: GramError = GramError.BAD_RSL) -> RSLError:
    return RSLError(message, code=code, line=node.line, column=node.column)


def components(spec: Spec) -> list[Spec]:
    """The job specifications of a request: one, or one per multi-request component."""
    if isinstance(spec, Relation):
        raise _bad(f"a job request is a conjunction: write &({spec.attribute} = ...), not a "
                   "bare relation", spec)
    if spec.op is BoolOp.AND:
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


def _early(job: Spec) -> None:
    """The shape of the attributes GRAM reads before evaluating the request: one
    string each (a reference or concatenation is fine: evaluation makes it one)."""
    relations = _relations(job)
    for key in _EARLY:
        for rel in relations:
            if rel.key != key:
                continue
            rule = rule_for(key)
            assert rule is not None
            if len(rel.values) != 1:
                culprit = rel.values[1] if len(rel.values) > 1 else rel
                raise rule.shape(f"expects one value, got {len(rel.values)}", culprit, rel)
            if isinstance(rel.values[0], Sequence):
                raise rule.shape("expects a single string, not a sequence", rel.values[0], rel)
            if isinstance(rel.values[0], Literal):
                rule.check(rel)  # a restart contact written out is read at once


def _spelled(name: str, like: str) -> str:
    """``name`` (a rule's snake_case name) written the way ``like`` is: camelCase when
    the user writes camelCase."""
    if "_" in name and "_" not in like and any(c.isupper() for c in like):
        head, *rest = name.split("_")
        return head + "".join(part.capitalize() for part in rest)
    return name


def _unknown(rel: Relation) -> RSLError:
    close = difflib.get_close_matches(rel.key, list(RULES), n=1, cutoff=0.75)
    hint = f"; did you mean {_spelled(RULES[close[0]].name, rel.attribute)}?" if close else ""
    return RSLError(f"unknown RSL attribute {rel.attribute!r}{hint}",
                    code=GramError.PARAMETER_NOT_SUPPORTED, key=rel.attribute,
                    line=rel.line, column=rel.column)


def _when(rule: Rule, rel: Relation, restart: bool) -> None:
    """Refuse an attribute GRAM does not take in this kind of request."""
    if restart and rule.when == SUBMIT:
        raise RSLError(f"{rel.attribute} cannot be given in a restart request (restart = ...): "
                       "a restart may change only stdout, stderr, their positions, two_phase, "
                       "save_state, remote_io_url and proxy_timeout",
                       code=GramError.INVALID_RESTART_ATTRIBUTE, key=rel.attribute,
                       line=rel.line, column=rel.column)
    if not restart and rule.when == RESTART:
        raise RSLError(f"{rel.attribute} is only valid when restarting a job manager "
                       "(with restart = CONTACT), not in a job submission",
                       code=GramError.INVALID_SUBMIT_ATTRIBUTE, key=rel.attribute,
                       line=rel.line, column=rel.column)


def _names(relations: tuple[Relation, ...], restart: bool) -> dict[str, Rule]:
    """Phase of names: '=' only, known attributes, each once, valid in this request."""
    rules: dict[str, Rule] = {}
    for rel in relations:
        if rel.op is not RelOp.EQ:
            raise _bad(f"{rel.attribute}: a job request allows only '=' relations, not {rel.op.value!r}", rel)
        rule = rule_for(rel.key)
        if rule is None:
            raise _unknown(rel)
        if rel.key in rules and rel.key != SUBSTITUTION_KEY:
            raise rule.shape("given more than once", rel, rel)
        _when(rule, rel, restart)
        rules[rel.key] = rule
    return rules


def check_job(job: Spec) -> CheckedJob:
    """Validate one evaluated job specification, in GRAM's phases (module docstring)."""
    relations = _relations(job)
    restart = any(rel.key == "restart" for rel in relations)
    values: dict[str, Any] = {}

    def run(keys: tuple[str, ...] | None, wanted: type = Rule) -> None:
        for rel in relations:
            if rel.key not in values and (keys is None or rel.key in keys) \
                    and isinstance(rules[rel.key], wanted):
                values[rel.key] = rules[rel.key].check(rel)

    if restart:  # the contact comes first: GRAM's restart starts from it
        first = next(rel for rel in relations if rel.key == "restart")
        values["restart"] = RULES["restart"].check(first)
    rules = _names(relations, restart)
    run(None, ChoiceRule)  # enumerations
    if not restart and "executable" not in rules:
        raise _bad("the job names no executable", job, GramError.UNDEFINED_EXE)
    for keys in _PHASES:
        run(keys)
    run(None)
    return CheckedJob(job, relations, values, rules)


def check(spec: Spec, variables: Mapping[str, str] | None = None, *,
          max_substitution: int = DEFAULT_MAX_SUBSTITUTION) -> tuple[Spec, list[CheckedJob]]:
    """Evaluate ``spec`` (output budget ``max_substitution`` bytes, see :func:`evaluate`);
    return the evaluated tree and its validated jobs, in order."""
    for job in components(spec):  # the structure, then what GRAM reads before evaluating
        _early(job)
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
