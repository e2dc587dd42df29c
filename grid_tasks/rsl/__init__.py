"""Globus RSL v1.0: parse, unparse, substitute, GRAM-validate and lower job requests.

Pure code (no Celery, Redis or SQL)::

    from grid_tasks.rsl import lower
    subjobs = lower('+(&(resourceManagerContact=rm1)(count=4)(executable=/bin/app))'
                    '(&(resourceManagerContact=rm2)(count=8)(executable=/bin/app))',
                    variables={"HOME": "/home/alice"})

Every rejection is an :class:`RSLError` whose ``code`` is the GRAM protocol
error name (:class:`GramError`) a Globus job manager would report.
"""

from grid_tasks.rsl.ast import (
    Boolean,
    BoolOp,
    Concat,
    Literal,
    RelOp,
    Relation,
    Sequence,
    Spec,
    Value,
    Variable,
    canonical_attribute,
)
from grid_tasks.rsl.errors import GramError, RSLError
from grid_tasks.rsl.evaluate import (
    DEFAULT_MAX_SUBSTITUTION,
    JOB_MANAGER_VARIABLES,
    STANDARD_VARIABLES,
    deferred_variables,
    evaluate,
)
from grid_tasks.rsl.lower import SubjobRequest, lower
from grid_tasks.rsl.parser import parse
from grid_tasks.rsl.unparse import unparse
from grid_tasks.rsl.validate import validate

__all__ = [
    "DEFAULT_MAX_SUBSTITUTION",
    "Boolean",
    "BoolOp",
    "Concat",
    "GramError",
    "JOB_MANAGER_VARIABLES",
    "Literal",
    "RSLError",
    "RelOp",
    "Relation",
    "STANDARD_VARIABLES",
    "Sequence",
    "Spec",
    "SubjobRequest",
    "Value",
    "Variable",
    "canonical_attribute",
    "deferred_variables",
    "evaluate",
    "lower",
    "parse",
    "unparse",
    "validate",
]
