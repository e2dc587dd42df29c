"""The attributes a job request may carry, each checked by a small rule object.

The set is the GRAM5 job manager's (its ``.rvf`` validation file) plus the
DUROC subjob attributes and the broker's ``requirements``.  Error codes follow
the Globus job manager: a value of the wrong *shape* earns the attribute's
``RSL_*`` code, a well-formed value outside the allowed range or set earns its
``INVALID_*`` code (where GRAM has one; otherwise GRAM falls back to
``RSL_SCHEDULER_SPECIFIC``, and so do we).

Messages name the attribute as the user spelled it (``maxWallTime`` stays
``maxWallTime``): every check gets the relation, whose ``attribute`` is the
spelling from the request.  Each rule says when GRAM accepts it (``when``): in a
submission, in a restart request (``&(restart=CONTACT)...``), or both.
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
#: When GRAM accepts an attribute: in a job submission, in a restart request, or both.
SUBMIT, RESTART, BOTH = "submit", "restart", "both"
#: A job contact as a restart names it (``gram://<rm>/jobs/<id>``, what a submission
#: answers); anything else is refused as GRAM refuses a bad restart contact.
_CONTACT = re.compile(r"gram://[^/\s]+/jobs/[0-9]+\Z")
#: GRAM's job manager log levels, joined by ``|`` in a ``loglevel`` value.
LOG_LEVELS = ("FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE")


def _at(node: Value | Relation) -> dict[str, int]:
    return {"line": node.line, "column": node.column}


@dataclass(frozen=True)
class Rule:
    """Base rule: an attribute name, its error codes, and whether GRAM sees it."""

    name: str
    shape_error: GramError
    value_error: GramError = G.RSL_SCHEDULER_SPECIFIC
    forwarded: bool = True  # False: DUROC/broker-only, stripped from the GRAM subjob
    when: str = SUBMIT  # SUBMIT, RESTART or BOTH (see the module docstring)

    def check(self, rel: Relation) -> Any:
        """The typed value of ``rel`` (evaluated), or raise :class:`RSLError`."""
        raise NotImplementedError

    def shape(self, message: str, node: Value | Relation, rel: Relation | None = None) -> RSLError:
        """The attribute's shape error (``RSL_*``), naming it as ``rel`` spells it."""
        return self._error(self.shape_error, message, node, rel)

    def invalid(self, message: str, node: Value | Relation, rel: Relation | None = None) -> RSLError:
        """The attribute's value error (``INVALID_*``), naming it as ``rel`` spells it."""
        return self._error(self.value_error, message, node, rel)

    def _error(self, code: GramError, message: str, node: Value | Relation,
               rel: Relation | None) -> RSLError:
        spelled = rel.attribute if rel is not None else self.name
        return RSLError(f"{spelled}: {message}", code=code, key=self.name, **_at(node))

    def single(self, rel: Relation) -> Literal:
        if len(rel.values) != 1:
            culprit = rel.values[1] if len(rel.values) > 1 else rel
            raise self.shape(f"expects one value, got {len(rel.values)}", culprit, rel)
        value = rel.values[0]
        if not isinstance(value, Literal):
            raise self.shape("expects a single string, not a sequence", value, rel)
        return value


@dataclass(frozen=True)
class StringRule(Rule):
    """One string; ``nonempty`` refuses ``""`` with the value error."""

    nonempty: bool = False

    def check(self, rel: Relation) -> str:
        value = self.single(rel)
        if self.nonempty and not value.value.strip():
            raise self.invalid("must not be empty", value, rel)
        return value.value


@dataclass(frozen=True)
class StringListRule(Rule):
    """One or more strings (arguments, file_clean_up, library_path)."""

    def check(self, rel: Relation) -> tuple[str, ...]:
        for value in rel.values:
            if not isinstance(value, Literal):
                raise self.shape("expects plain strings, not a nested sequence", value, rel)
        return tuple(v.value for v in rel.values)  # type: ignore[union-attr]


@dataclass(frozen=True)
class IntRule(Rule):
    """A decimal integer in ``minimum..maximum`` (counts, minutes, megabytes, seconds)."""

    minimum: int = 0
    maximum: int = INT_MAX

    def check(self, rel: Relation) -> int:
        return self.number(self.single(rel), rel)

    def number(self, value: Literal, rel: Relation) -> int:
        """The integer ``value`` holds, or the value error saying what is allowed."""
        text = value.value.strip()
        if not _DIGITS.match(text):
            raise self.invalid(f"must be {self._kind()}, got {value.value!r}", value, rel)
        # Compare lengths before int(): a few thousand digits (leading zeros included)
        # would trip CPython's int() digit limit instead of earning the attribute's error.
        significant = text.lstrip("0") or "0"
        if len(significant) > len(str(self.maximum)) or int(significant) > self.maximum:
            shown = significant if len(significant) <= 20 else f"a {len(significant)}-digit number"
            raise self.invalid(f"must be at most {self.maximum}, got {shown}", value, rel)
        number = int(significant)
        if number < self.minimum:
            raise self.invalid(f"must be {self._kind()}, got {number}", value, rel)
        return number

    def _kind(self) -> str:
        if self.minimum == 0:
            return "a whole number (0 or more)"
        if self.minimum == 1:
            return "a positive whole number"
        return f"a whole number of at least {self.minimum}"


@dataclass(frozen=True)
class TwoPhaseRule(IntRule):
    """two_phase: a commit timeout in seconds, or ``yes`` (GRAM's default timeout, 60 s)
    or ``no`` (0), as GRAM reads it: an integer first, then a boolean."""

    def check(self, rel: Relation) -> int:
        value = self.single(rel)
        word = value.value.strip().lower()
        if word in ("yes", "true"):
            return TWO_PHASE_DEFAULT_S
        if word in ("no", "false"):
            return 0
        if not _DIGITS.match(word):
            raise self.invalid(f"must be yes, no or a timeout in seconds, got {value.value!r}",
                               value, rel)
        return self.number(value, rel)


#: The commit timeout of ``two_phase=yes`` (GRAM's GRAM_JOB_MANAGER_COMMIT_TIMEOUT).
TWO_PHASE_DEFAULT_S = 60


@dataclass(frozen=True)
class ChoiceRule(Rule):
    """One of a fixed set of words."""

    choices: tuple[str, ...] = ()

    def check(self, rel: Relation) -> str:
        value = self.single(rel)
        if value.value not in self.choices:
            allowed = " | ".join(self.choices)
            raise self.invalid(f"{value.value!r} is not one of {allowed}", value, rel)
        return value.value


@dataclass(frozen=True)
class PairsRule(Rule):
    """A list of ``(a b)`` pairs: environment, file staging."""

    bad_name_error: GramError | None = None  # environment: names must be usable

    def check(self, rel: Relation) -> tuple[tuple[str, str], ...]:
        pairs = []
        for value in rel.values:
            if not (isinstance(value, Sequence) and len(value.items) == 2):
                raise self.shape("expects (NAME VALUE) pairs", value, rel)
            first, second = value.items
            if not (isinstance(first, Literal) and isinstance(second, Literal)):
                raise self.shape("each pair holds two plain strings", value, rel)
            if self.bad_name_error and (not first.value or "=" in first.value or "\0" in first.value):
                raise RSLError(
                    f"{rel.attribute}: {first.value!r} is not a valid variable name",
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
                raise self.shape("expects a destination or (destination [tag]) sequences", value, rel)
            destinations.append(items[0].value)  # type: ignore[union-attr]
        return tuple(destinations)


@dataclass(frozen=True)
class RestartRule(StringRule):
    """restart: the contact of the job whose job manager is to be restarted."""

    def check(self, rel: Relation) -> str:
        contact = super().check(rel)
        if not _CONTACT.match(contact.strip()):
            raise self.shape(f"{contact!r} is not a job contact (gram://<rm>/jobs/<id>)",
                             rel.values[0], rel)
        return contact.strip()


@dataclass(frozen=True)
class LogLevelRule(StringRule):
    """loglevel: job manager log levels joined by ``|`` (``ERROR|WARN``)."""

    def check(self, rel: Relation) -> str:
        text = super().check(rel)
        words = [w.strip().upper() for w in text.split("|")]
        unknown = [w for w in words if w not in LOG_LEVELS]
        if unknown:
            raise self.shape(f"{unknown[0] or 'an empty level'!r} is not a log level "
                             f"({' | '.join(LOG_LEVELS)}, joined by '|')", rel.values[0], rel)
        return "|".join(words)


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
    OutputRule("stdout", G.RSL_STDOUT, when=BOTH),
    OutputRule("stderr", G.RSL_STDERR, when=BOTH),
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
    ChoiceRule("save_state", G.RSL_SAVE_STATE, G.INVALID_SAVE_STATE, choices=_YES_NO, when=BOTH),
    TwoPhaseRule("two_phase", G.RSL_TWO_PHASE_COMMIT, G.INVALID_TWO_PHASE_COMMIT, when=BOTH),
    StringRule("remote_io_url", G.RSL_REMOTE_IO_URL, when=BOTH),
    StringRule("scratch_dir", G.RSL_SCRATCH),
    # GRAM reads gass_cache when it opens the job's cache, before it validates the
    # request: a bad one earns RSL_CACHE there (see validate.py's phases)
    StringRule("gass_cache", G.RSL_CACHE),
    PairsRule("file_stage_in", G.RSL_FILE_STAGE_IN),
    PairsRule("file_stage_in_shared", G.RSL_FILE_STAGE_IN_SHARED),
    PairsRule("file_stage_out", G.RSL_FILE_STAGE_OUT),
    StringListRule("file_clean_up", G.RSL_FILE_CLEANUP),
    IntRule("proxy_timeout", G.RSL_PROXY_TIMEOUT, G.INVALID_PROXY_TIMEOUT, when=BOTH),
    # GRAM5's job manager reads these two (INVALID_ATTR when unreadable)
    LogLevelRule("loglevel", G.INVALID_ATTR, G.INVALID_ATTR),
    StringRule("logpattern", G.INVALID_ATTR, G.INVALID_ATTR),
    StringListRule("library_path", G.RSL_SCHEDULER_SPECIFIC),
    StringRule("username", G.RSL_SCHEDULER_SPECIFIC),
    ChoiceRule("savejobdescription", G.RSL_SCHEDULER_SPECIFIC, choices=_YES_NO),
    IntRule("expiration", G.RSL_SCHEDULER_SPECIFIC),
    # a grid reservation made by the broker for this job (like Maui's ADVRES)
    StringRule("reservation", G.RSL_SCHEDULER_SPECIFIC, nonempty=True),
    # a restart request: &(restart=CONTACT) and the few attributes a restart may change
    RestartRule("restart", G.RSL_RESTART, G.RSL_RESTART, when=RESTART),
    IntRule("stdout_position", G.RSL_STDOUT_POSITION, G.INVALID_STDOUT_POSITION, when=RESTART),
    IntRule("stderr_position", G.RSL_STDERR_POSITION, G.INVALID_STDERR_POSITION, when=RESTART),
    StringListRule("restartcontacts", G.RSL_SCHEDULER_SPECIFIC, when=RESTART),
    SubstitutionRule("rsl_substitution", G.RSL_EVALUATION_FAILED, when=BOTH),
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
