"""The RSL variables a job manager defines, evaluated where the gatekeeper maps the submitter.

GRAM's job manager evaluates a request in the symbol table of the account the
gatekeeper mapped the submitter to: ``HOME`` and ``LOGNAME`` are that account's,
``GLOBUS_GRAM_JOB_CONTACT`` the job's own contact, ``GLOBUS_GATEKEEPER_HOST``,
``_PORT`` and ``_SUBJECT`` say where the request came in, and
``GLOBUS_CACHED_STDOUT`` / ``_STDERR`` name the job's cached output.  A client
cannot know them (and must not choose them: they belong to the mapped account),
so the client and ``rsl check`` evaluate with stand-ins
(:func:`grid_tasks.rsl.deferred_variables`) and the gatekeeper evaluates again
with the real values, which win over any the caller passed.

Here the gatekeeper is reached through the broker (its port is the broker's) and
signs with its certificate (its subject; empty when signing is off).  A job's
output is captured into its output stream, so the cached output is that stream:
``<contact>/stdout``; ``stdout = $(GLOBUS_CACHED_STDOUT)`` asks for nothing else.
The job contact exists only once the job is stored: a request that uses a
contact-bound variable is evaluated again then (:meth:`JobManagerRequest.rebind`).
"""

from __future__ import annotations

import os
import pwd
import socket
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlsplit

from grid_tasks.errors import GridTasksError
from grid_tasks.rsl import SubjobRequest, deferred_variables, lower
from grid_tasks.security.authorization import authorize
from grid_tasks.security.keys import describe

#: The variables whose value needs the job's contact (known once it is stored).
CONTACT_BOUND = ("GLOBUS_GRAM_JOB_CONTACT", "GLOBUS_CACHED_STDOUT", "GLOBUS_CACHED_STDERR")
_REDIS_PORT = 6379


def mapped_account(settings: Any, identity: str | None, rm: str,
                   wanted: str | None) -> str | None:
    """The local account the grid map gives ``identity`` on ``rm`` (None: no grid map,
    or a refusal, which the storing step reports with its full context)."""
    if not identity:
        return None
    try:
        granted = authorize(settings, identity, rm, account=wanted)
    except GridTasksError:
        return None
    return granted.name if granted else None


def account_variables(account: str | None) -> dict[str, str]:
    """``HOME`` and ``LOGNAME`` of ``account`` (None: this worker's own, as its jobs run
    as it).  An account unknown on this host defines LOGNAME only: its job fails on
    the node, with the reason, unless its request needs ``$(HOME)``."""
    try:
        entry = pwd.getpwuid(os.geteuid()) if account is None else pwd.getpwnam(account)
    except KeyError:
        return {"LOGNAME": account} if account else {}
    return {"HOME": entry.pw_dir, "LOGNAME": entry.pw_name}


@lru_cache(maxsize=4)
def _subject(cert: Path | None) -> str:
    if cert is None:
        return ""
    try:
        return describe(cert).subject
    except GridTasksError:
        return ""


def gatekeeper_variables(settings: Any) -> dict[str, str]:
    """Where the request came in: this host, the broker's port, this worker's subject."""
    try:
        port = urlsplit(settings.broker_url).port or _REDIS_PORT
    except ValueError:
        port = _REDIS_PORT
    signing = settings.signing
    return {"GLOBUS_GATEKEEPER_HOST": socket.gethostname(),
            "GLOBUS_GATEKEEPER_PORT": str(port),
            "GLOBUS_GATEKEEPER_SUBJECT": _subject(signing.cert if signing.enabled else None)}


def contact_variables(contact: str) -> dict[str, str]:
    """The job's contact and its cached output (its captured streams)."""
    return {"GLOBUS_GRAM_JOB_CONTACT": contact, "GLOBUS_CACHED_STDOUT": f"{contact}/stdout",
            "GLOBUS_CACHED_STDERR": f"{contact}/stderr"}


@dataclass(frozen=True)
class JobManagerRequest:
    """One GRAM request as the job manager evaluates it, for the account it maps to."""

    rsl: str
    variables: Mapping[str, str]  # the caller's and the job manager's (which win)
    source: str
    max_substitution: int

    @classmethod
    def for_account(cls, settings: Any, rsl: str, caller: Mapping[str, str] | None,
                    account: str | None, source: str) -> "JobManagerRequest":
        """The request of a submitter mapped to ``account``; contact-bound variables are
        stand-ins until :meth:`rebind`."""
        variables = {**(caller or {}), **deferred_variables(CONTACT_BOUND),
                     **account_variables(account), **gatekeeper_variables(settings)}
        return cls(rsl, variables, source, settings.rsl_max_substitution)

    def lower(self) -> SubjobRequest:
        """The lowered request (one job: a multi-request is DUROC's)."""
        (sub,) = lower(self.rsl, self.variables, source=self.source,
                       max_substitution=self.max_substitution)
        return _cached_output(sub, self.variables)

    @property
    def contact_bound(self) -> bool:
        """Whether the request may use a variable that needs the job's contact."""
        return any(name in self.rsl for name in CONTACT_BOUND)

    def rebind(self, contact: str) -> SubjobRequest | None:
        """The request evaluated with the stored job's ``contact`` (None: it uses no
        contact-bound variable, so the first evaluation stands)."""
        if not self.contact_bound:
            return None
        return replace(self, variables={**self.variables, **contact_variables(contact)}).lower()


def _cached_output(sub: SubjobRequest, variables: Mapping[str, str]) -> SubjobRequest:
    """stdout/stderr naming the cached output mean the captured stream alone."""
    if sub.stdout is not None and sub.stdout == variables.get("GLOBUS_CACHED_STDOUT"):
        sub.stdout = None
    if sub.stderr is not None and sub.stderr == variables.get("GLOBUS_CACHED_STDERR"):
        sub.stderr = None
    return sub
