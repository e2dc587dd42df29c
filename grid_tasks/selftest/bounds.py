"""Attacks by small input that would take unbounded work (issue 20, finding 5): an RSL
``rslSubstitution`` that doubles a value 28 times (550 bytes -> 268 MB) sent straight
to a gatekeeper, and a MIL ``match()`` whose regex backtracks exponentially."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from grid_tasks.gram.door import SUBMIT, ask
from grid_tasks.rsl.errors import RSLError
from grid_tasks.security.roles import Role
from grid_tasks.selftest.rows import Attack

if TYPE_CHECKING:
    from grid_tasks.selftest.target import Target

BOUND_S = 2.0
DOUBLINGS = 28


def doubling_rsl(doublings: int = DOUBLINGS) -> str:
    """``V0 = a``, ``Vn = Vn-1 Vn-1``: a few hundred bytes whose value has 2**n bytes.

    The count no RM can hold makes the gatekeeper refuse the job *after* evaluating it
    when evaluation is not capped: the attack then costs time and memory but stores no
    268 MB job."""
    subs = "".join(f"(V{i} $(V{i - 1})$(V{i - 1}))" for i in range(1, doublings + 1))
    return (f'&(rslSubstitution=(V0 "a"){subs})(executable=/bin/true)(count=1000000)'
            f"(arguments=$(V{doublings}))")


class RslDoubling(Attack):
    name = "rsl-doubling"
    expected = f"refused with RSL_EVALUATION_FAILED within {BOUND_S:g} s"

    def perform(self, target: "Target") -> tuple[bool, str]:
        rsl = doubling_rsl()
        started = time.monotonic()
        try:  # the gatekeeper itself, skipping the client's own evaluation of the RSL
            reply = ask(target.fg.grid.app, SUBMIT, "rmA",
                        {"rsl": rsl, "creds": {}, "idempotency_key": None, "extra_env": None,
                         "variables": None, "source": "<selftest>"},
                        shadow="submit to rmA", timeout=30)
            outcome, code = f"ACCEPTED as job {reply.get('id')}", None
        except RSLError as exc:
            outcome, code = f"refused {exc.code}", exc.code
        except Exception as exc:  # noqa: BLE001 - another refusal: reported as it is
            outcome, code = f"refused {type(exc).__name__}: {str(exc)[:80]}", None
        took = time.monotonic() - started
        ok = code == "RSL_EVALUATION_FAILED" and took <= BOUND_S
        return ok, f"{len(rsl)} bytes of RSL: {outcome} after {took:.2f} s"


#: 20 a's and a '!' (21 characters): a near-miss for the nested optional repeat.
MIL_QUERY = 'match("' + "a" * 20 + '!", "(?:a?a?)+$")'


class MilBacktracking(Attack):
    name = "mil-backtracking"
    expected = f"MIL error, or an answer, within {BOUND_S:g} s"

    def perform(self, target: "Target") -> tuple[bool, str]:
        """In a child process (a regex cannot be interrupted): the live collection is
        loaded first, then only the query is timed; the child is killed at the bound."""
        env = target.fg.env(Role.USER)
        child = subprocess.Popen([sys.executable, "-m", "grid_tasks.selftest.mil_probe",
                                  MIL_QUERY], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        try:
            ready = child.stdout.readline().strip()  # type: ignore[union-attr]
            if ready != "ready":
                child.kill()
                err = child.communicate()[1].strip().splitlines()
                return False, f"the probe did not start: {err[-1] if err else ready!r}"
            started = time.monotonic()
            try:
                out, _ = child.communicate(timeout=BOUND_S + 0.5)
            except subprocess.TimeoutExpired:
                return False, (f"still evaluating after {time.monotonic() - started:.1f} s "
                               "(killed)")
        finally:
            if child.poll() is None:
                child.kill()
                child.communicate()
        result = json.loads(out)
        took = result["seconds"]
        return took <= BOUND_S, f"{result['outcome']} after {took:.2f} s"
