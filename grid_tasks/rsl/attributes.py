"""The attributes a job request may carry, each checked by a small rule object.

The set is the GRAM5 job manager's (its ``.rvf`` validation file) plus the
DUROC subjob attributes and the broker's ``requirements``.  Error codes follow
the Globus job manager: a value of the wrong *shape* earns the attribute's
``RSL_*`` code, a well-formed value outside the allowed range or set earns its
``INVALID_*`` code (where GRAM has one; otherwise GRAM falls back to
``RSL_SCHEDULER_SPECIFIC``, and so do we).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from grid_tasks.rsl.ast import Literal, Relation, Sequence, Value, canonical_attribute
from grid_tasks.rsl.errors import GramError, RSLError

G = GramError
_DIGITS = re.compile(r"[0-9]+\Z")
#: GRAM reads numeric attributes into a C ``int``; larger values are refused the
#: same way, which also keeps Python's int() digit limit out of reach.
INT_MAX = 2**31 - 1


def _at(node: Value | Relation) -> dict[str, int]:
    return {"line": node.line, "column": node.column}


@dataclass(frozen=True)
class Rule:
    """Base rule: an attribute name, its error codes, and whether GRAM sees it."""

    name: str
    shape_error: GramError
    value_error: GramError = G.RSL_SCHEDULER_SPECIFIC
    forwarded: bool = True  # False: DUROC/broker-only, stripped from the GRAM subjob

    def check(self, rel: Relation) -> Any:
        """The typed value of ``rel`` (evaluated), or raise :class:`RSLError`."""
        raise NotImplementedError

    def shape(self, message: str, node: Value | Relation) -> RSLError:
        return RSLError(f"{self.name}: {message}", code=self.shape_error, key=self.name, **_at(node))

    def invalid(self, message: str, node: Value | Relation) -> RSLError:
        return RSLError(f"{self.name}: {message}", code=self.value_error, key=self.name, **_at(node))

    def single(self, rel: Relation) -> Literal:
        if len(rel.values) != 1:
            culprit = rel.values[1] if len(rel.values) > 1 else rel
            raise self.shape(f"expects one value, got {len(rel.values)}", culprit)
        value = rel.values[0]
        if not isinstance(value, Literal):
            raise self.shape("expects a single string, not a sequence", value)
        return value


@dataclass(frozen=True)
class StringRule(Rule):
    """One string; ``nonempty`` refuses ``""`` with the value error."""

    nonempty: bool = False

    def check(self, rel: Relation) -> str:
        value = self.single(rel)
        if self.nonempty and not value.value.strip():
            raise self.invalid("must not be empty", value)
        return value.value


@dataclass(frozen=True)
class StringListRule(Rule):
    """One or more strings (arguments, file_clean_up, library_path)."""

    def check(self, rel: Relation) -> tuple[str, ...]:
        for value in rel.values:
            if not isinstance(value, Literal):
                raise self.shape("expects plain strings, not a nested sequence", value)
        return tuple(v.value for v in rel.values)  # type: ignore[union-attr]


@dataclass(frozen=True)
class IntRule(Rule):
    """A decimal integer in ``minimum..maximum`` (counts, minutes, megabytes, seconds)."""

    minimum: int = 0
    maximum: int = INT_MAX

    def check(self, rel: Relation) -> int:
        value = self.single(rel)
        text = value.value.strip()
        if not _DIGITS.match(text):
            raise self.invalid(f"{value.value!r} is not a whole number", value)
        # Compare lengths before int(): a few thousand digits (leading zeros included)
        # would trip CPython's int() digit limit instead of earning the attribute's error.
        significant = text.lstrip("0") or "0"
        if len(significant) > len(str(self.maximum)) or int(significant) > self.maximum:
            shown = significant if len(significant) <= 20 else f"a {len(significant)}-digit number"
            raise self.invalid(f"must be at most {self.maximum}, got {shown}", value)
        number = int(significant)
        if number < self.minimum:
            raise self.invalid(f"must be at least {self.minimum}, got {number}", value)
        return number


@dataclass(frozen=True)
class ChoiceRule(Rule):
    """One of a fixed set of words."""

    choices: tuple[str, ...] = ()

    def check(self, rel: Relation) -> str:
        value = self.single(rel)
        if value.value not in self.choices:
            allowed = " | ".join(self.choices)
            raise self.invalid(f"{value.value!r} is not one of {allowed}", value)
        return value.value


@dataclass(frozen=True)
class PairsRule(Rule):
    """A list of ``(a b)`` pairs: environment, file staging."""

    bad_name_error: GramError | None = None  # environment: names must be usable

    def check(self, rel: Relation) -> tuple[tuple[str, str], ...]:
        pairs = []
        for value in rel.values:
            if not (isinstance(value, Sequence) and len(value.items) == 2):
                raise self.shape("expects (NAME VALUE) pairs", value)
            first, second = value.items
            if not (isinstance(first, Literal) and isinstance(second, Literal)):
                raise self.shape("each pair holds two plain strings", value)
            if self.bad_name_error and (not first.value or "=" in first.value or "\0" in first.value):
                raise RSLError(
                    f"{self.name}: {first.value!r} is not a valid variable name",
                    code=self.bad_name_error,
                    key=self.name,
                    **_at(first),
                )
            pairs.append((first.value, second.value))
        return tuple(pairs)


@dataclass(frozen=True)
class OutputRule(Rule):
    """stdout/stderr: one destination, or ``(URL [tag]) (URL [tag])...``."""

    def check(self, rel: Relation) -> tuple[str, ...]:
        if len(rel.values) == 1 and isinstance(rel.values[0], Literal):
            return (rel.values[0].value,)
        destinations = []
        for value in rel.values:
            items = value.items if isinstance(value, Sequence) else ()
            if not 1 <= len(items) <= 2 or not all(isinstance(i, Literal) for i in items):
                raise self.shape("expects a destination or (destination [tag]) sequences", value)
            destinations.append(items[0].value)  # type: ignore[union-attr]
        return tuple(destinations)


@dataclass(frozen=True)
class NotAtSubmitRule(Rule):
    """Valid only when restarting a job manager, never in a submission."""

    def check(self, rel: Relation) -> None:
        raise RSLError(
            f"{self.name} is only valid when restarting a job manager, not in a job submission",
            code=G.INVALID_SUBMIT_ATTRIBUTE,
            key=self.name,
            **_at(rel),
        )


@dataclass(frozen=True)
class SubstitutionRule(Rule):
    """rsl_substitution: applied by evaluation, nothing left to check."""

    def check(self, rel: Relation) -> None:
        return None


_YES_NO = ("yes", "no")
_RULES: tuple[Rule, ...] = (
    StringRule("executable", G.RSL_EXECUTABLE, G.RSL_EXECUTABLE, nonempty=True),
    StringListRule("arguments", G.RSL_ARGUMENTS),
    StringRule("directory", G.RSL_DIRECTORY),
    StringRule("stdin", G.RSL_STDIN),
    OutputRule("stdout", G.RSL_STDOUT),
    OutputRule("stderr", G.RSL_STDERR),
    IntRule("count", G.RSL_COUNT, G.INVALID_COUNT, minimum=1),
    IntRule("host_count", G.RSL_HOST_COUNT, G.INVALID_HOST_COUNT, minimum=1),
    PairsRule("environment", G.RSL_ENVIRONMENT, bad_name_error=G.BAD_RSL_ENVIRONMENT),
    IntRule("max_time", G.RSL_MAXTIME, G.INVALID_MAXTIME, minimum=1),
    IntRule("max_wall_time", G.RSL_MAX_WALL_TIME, G.INVALID_MAX_WALL_TIME, minimum=1),
    IntRule("max_cpu_time", G.RSL_MAX_CPU_TIME, G.INVALID_MAX_CPU_TIME, minimum=1),
    IntRule("max_memory", G.RSL_MAX_MEMORY, G.INVALID_MAX_MEMORY),
    IntRule("min_memory", G.RSL_MIN_MEMORY, G.INVALID_MIN_MEMORY),
    ChoiceRule("job_type", G.RSL_JOBTYPE, G.INVALID_JOBTYPE, choices=("single", "multiple", "mpi", "condor")),
    ChoiceRule("gram_my_job", G.RSL_MYJOB, G.INVALID_GRAM_MYJOB, choices=("collective", "independent")),
    StringRule("queue", G.RSL_QUEUE),
    StringRule("project", G.RSL_PROJECT),
    # GRAM has no INVALID_DRYRUN: its validator falls back to RSL_SCHEDULER_SPECIFIC
    ChoiceRule("dry_run", G.RSL_DRYRUN, choices=_YES_NO),
    ChoiceRule("save_state", G.RSL_SAVE_STATE, G.INVALID_SAVE_STATE, choices=_YES_NO),
    IntRule("two_phase", G.RSL_TWO_PHASE_COMMIT, G.INVALID_TWO_PHASE_COMMIT),
    StringRule("remote_io_url", G.RSL_REMOTE_IO_URL),
    StringRule("scratch_dir", G.RSL_SCRATCH),
    StringRule("gass_cache", G.RSL_GASS_CACHE),
    PairsRule("file_stage_in", G.RSL_FILE_STAGE_IN),
    PairsRule("file_stage_in_shared", G.RSL_FILE_STAGE_IN_SHARED),
    PairsRule("file_stage_out", G.RSL_FILE_STAGE_OUT),
    StringListRule("file_clean_up", G.RSL_FILE_CLEANUP),
    IntRule("proxy_timeout", G.RSL_PROXY_TIMEOUT, G.INVALID_PROXY_TIMEOUT),
    StringListRule("library_path", G.RSL_SCHEDULER_SPECIFIC),
    StringRule("username", G.RSL_SCHEDULER_SPECIFIC),
    ChoiceRule("savejobdescription", G.RSL_SCHEDULER_SPECIFIC, choices=_YES_NO),
    IntRule("expiration", G.RSL_SCHEDULER_SPECIFIC),
    # a grid reservation made by the broker for this job (like Maui's ADVRES)
    StringRule("reservation", G.RSL_SCHEDULER_SPECIFIC, nonempty=True),
    NotAtSubmitRule("restart", G.RSL_RESTART),
    NotAtSubmitRule("stdout_position", G.RSL_STDOUT_POSITION),
    NotAtSubmitRule("stderr_position", G.RSL_STDERR_POSITION),
    NotAtSubmitRule("restartcontacts", G.RSL_SCHEDULER_SPECIFIC),
    SubstitutionRule("rsl_substitution", G.RSL_EVALUATION_FAILED),
    # DUROC subjob attributes and the broker's MIL requirements: not for GRAM
    StringRule("resourceManagerContact", G.BAD_GATEKEEPER_CONTACT, G.BAD_GATEKEEPER_CONTACT, False, nonempty=True),
    StringRule("label", G.BAD_RSL, G.BAD_RSL, False),
    ChoiceRule(
        "subjobStartType", G.BAD_RSL, G.BAD_RSL, False, choices=("strict-barrier", "loose-barrier", "no-barrier")
    ),
    ChoiceRule("subjobCommsType", G.BAD_RSL, G.BAD_RSL, False, choices=("blocking-join", "independent")),
    StringRule("requirements", G.BAD_RSL, G.BAD_RSL, False, nonempty=True),
)

#: canonical attribute key -> rule
RULES: dict[str, Rule] = {canonical_attribute(rule.name): rule for rule in _RULES}


def rule_for(key: str) -> Rule | None:
    """The rule for a canonical attribute key (see :func:`canonical_attribute`)."""
    return RULES.get(key)
