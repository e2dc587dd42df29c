"""Fault cases for the coordination layer: the active HA beat, and a live broker
killed mid-enactment (grid reservations in SQL, tokens not yet confirmed)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select

from grid_tasks.broker.live import Broker
from grid_tasks.db import Reservation, ReservationKind, session_scope
from grid_tasks.faults.broker_child import REQUESTER
from grid_tasks.faults.cases import RECOVERY_BOUND, FaultCase, probe
from grid_tasks.faults.harness import FaultGrid, FaultTimeout, until
from grid_tasks.faults.invariants import Check
from grid_tasks.ha.config import EMITTED_KEY, LEASE_KEY
from grid_tasks.ha.lease import read_holder
from grid_tasks.legion.tokens import TokenInvalid, TokenStore, scan
from grid_tasks.scheduling.grid_reservations import PRUNE_AFTER_S, SENTINEL
from grid_tasks.security.connections import redis_client


class BeatKill(FaultCase):
    name = "beat-failover"
    fault = "SIGKILL the active HA beat; the standby must take the lease and keep emitting"

    def exercise(self, fg: FaultGrid, marker: str, jobs: list[int]) -> tuple[float, str]:
        assert fg.settings is not None
        client = redis_client(fg.settings)  # TLS and ACL as configured
        try:
            leader = until(lambda: _holder(read_holder(client, LEASE_KEY), fg), 20,
                           "a beat to hold the lease")
            standby = next(n for n in fg.beats if n != leader)
            emitted = lambda name: int(client.hget(EMITTED_KEY, name) or 0)  # noqa: E731
            until(lambda: emitted(leader) > 0, 20, f"{leader} to emit iterations")
            killed = time.monotonic()
            os.killpg(fg.beats[leader].pid, signal.SIGKILL)
            fg.beats[leader].process.wait(10)
            before = emitted(standby)
            until(lambda: _holder(read_holder(client, LEASE_KEY), fg) == standby,
                  RECOVERY_BOUND, f"{standby} to take the lease")
            took = time.monotonic() - killed
            until(lambda: emitted(standby) > before, RECOVERY_BOUND,
                  f"{standby} to emit an iteration")
            recovery = time.monotonic() - killed
        finally:
            client.close()
        fg.revive()  # the killed beat comes back as a standby
        probe(fg, "rmA", marker, jobs, RECOVERY_BOUND)
        return recovery, (f"{leader} killed; {standby} held the lease after {took:.2f} s "
                          f"(lease {fg.beat_lease:g} s) and emitted after {recovery:.2f} s")


def _holder(holder: object, fg: FaultGrid) -> str | None:
    name = getattr(holder, "identity", None)
    return name if name in fg.beats else None


class BrokerKill(FaultCase):
    """A live broker (:mod:`grid_tasks.faults.broker_child`) SIGKILLed between the RMs'
    ``reserve`` (grid reservations written in SQL) and the confirmation of its tokens.

    Then the token store loses its state too, as in a Redis restart (every key of the
    store deleted, the half-made rows still young in SQL): the next RM iteration
    restores the store from SQL and must not revive the half-made rows, which were
    never marked enacted by their broker.

    Recovery: the tokens are gone (expired with their TTL, or lost with the store), and
    the next iteration of each RM prunes the grid reservation whose token is gone; then
    a fresh enactment over the same resource managers must succeed.  The iteration
    spares a reservation younger than
    :data:`~grid_tasks.scheduling.grid_reservations.PRUNE_AFTER_S` (a minute: its broker
    may still be confirming), so the case ages the dead rows by that much instead of
    waiting the minute out; everything else runs at its real pace.
    """

    name = "broker-mid-enactment"
    fault = ("SIGKILL a live broker after the RMs wrote their grid reservations in SQL, "
             "before its reservation tokens were confirmed; then the token store is lost "
             "(Redis restart) before the rows are pruned")
    token_ttl = 2.0
    lead = 5.0
    rsl = ("+(&(executable=/bin/true)(resourceManagerContact=rmA)(label=a)(maxWallTime=1))"
           "(&(executable=/bin/true)(resourceManagerContact=rmB)(label=b)(maxWallTime=1))")

    def exercise(self, fg: FaultGrid, marker: str, jobs: list[int]) -> tuple[float, str]:
        assert fg.settings is not None
        store = TokenStore.from_url(fg.settings.redis_url, settings=fg.settings)
        key = f"fault-{secrets.token_hex(4)}"
        flag = Path(fg.state_dir) / f"{key}.holding"
        try:
            held, rows, killed = self._kill_half_made(fg, store, key, flag)
            not_revived = _lose_store(store, key)
            _age(fg, key)
            until(lambda: not grid_rows(fg, key) and not _tokens_of(store, key),
                  RECOVERY_BOUND, "the dead broker's reservations and tokens to go",
                  poll=0.1)
            pruned = time.monotonic() - killed
            fresh = self._fresh_enactment(fg)
            recovery = time.monotonic() - killed
            self.extra = [*_token_checks(store, held, key),
                          Check("no half-made grid reservation", rows > 0,
                                f"{rows} grid reservations in SQL at the kill, pruned after "
                                f"{pruned:.2f} s"),
                          not_revived, fresh]
        finally:
            flag.unlink(missing_ok=True)
            store.client.close()
        return recovery, (f"{len(held)} tokens held at the kill with {rows} grid "
                          f"reservations in SQL; pruned after {pruned:.2f} s (token TTL "
                          f"{self.token_ttl:g} s); the same RMs takeable again: {fresh.detail}")

    def _kill_half_made(self, fg: FaultGrid, store: Any, key: str,
                        flag: Path) -> tuple[list[Any], int, float]:
        """Start a live broker, SIGKILL it once the RMs accepted: (tokens held, grid
        reservations in SQL, kill time)."""
        cfg = {"flag": str(flag), "rsl": self.rsl, "job_key": key, "ttl": self.token_ttl,
               "lead": self.lead}
        child = subprocess.Popen([sys.executable, "-m", "grid_tasks.faults.broker_child",
                                  json.dumps(cfg)], start_new_session=True, env=fg.env(),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            until(lambda: flag.exists() or child.poll() is not None, 40,
                  "the broker to hold its reservations")
            if child.poll() is not None:
                raise FaultTimeout(f"broker exited early: {child.stderr.read().decode()[-400:]}")
            ids = set(json.loads(flag.read_text())["tokens"])
            held = [t for t in store.tokens() if t.id in ids]
            rows = len(grid_rows(fg, key))
            killed = time.monotonic()
            os.killpg(child.pid, signal.SIGKILL)
        finally:
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGKILL)
            child.wait(10)
            child.stderr.close()
        return held, rows, killed

    def _fresh_enactment(self, fg: FaultGrid) -> Check:
        """Co-reserve the same request afresh (then release it): the RMs serve again."""
        assert fg.settings is not None
        key = f"fault-{secrets.token_hex(4)}"
        with Broker.for_settings(fg.settings, fg.grid.app, lead=self.lead,
                                 timeout=20.0) as broker:
            co = broker.coreserve(broker.components(self.rsl, REQUESTER), now=time.time(),
                                  job_key=key, requester=REQUESTER)
            made = len(grid_rows(fg, key))
            broker.release(co)
            left = len(grid_rows(fg, key)) + len(_tokens_of(broker.store, key))
        return Check("fresh enactment succeeds", made == len(co.parts) == 2 and left == 0,
                     f"{made} of {len(co.parts)} parts reserved on "
                     f"{', '.join(p.rm for p in co.parts)}, {left} left after release")


def grid_rows(fg: FaultGrid, key: str) -> list[Any]:
    """The grid reservations in SQL made for the broker job ``key``."""
    with session_scope(fg.grid.sessions) as session:
        rows = session.scalars(select(Reservation).where(
            Reservation.kind == ReservationKind.GRID)).all()
        return [r.name for r in rows if (r.resources or {}).get("job_key") == key]


def _age(fg: FaultGrid, key: str) -> None:
    """Make ``key``'s grid reservations look older than the iteration's grace period."""
    with session_scope(fg.grid.sessions) as session:
        for row in session.scalars(select(Reservation).where(
                Reservation.kind == ReservationKind.GRID)):
            if (row.resources or {}).get("job_key") == key:
                row.created_at = row.created_at - timedelta(seconds=PRUNE_AFTER_S + 1)


def _lose_store(store: Any, key: str) -> Check:
    """The token store loses its state (as Redis does when restarted without data) while
    the dead broker's rows are young in SQL; wait for an RM to restore it from SQL, then
    check it revived none of them (the broker never marked them enacted)."""
    client = store.client
    keys = list(client.scan_iter(match=f"{store.prefix}:*"))
    if keys:
        client.delete(*keys)
    until(lambda: client.exists(store.prefix + SENTINEL), RECOVERY_BOUND,
          "an RM iteration to restore the token store from SQL", poll=0.1)
    revived = sorted(t.group for t in store.tokens(include_expired=True)
                     if t.group.startswith("sql.") and f".{key}." in t.group)
    return Check("half-made not restored", not revived,
                 f"token store lost ({len(keys)} keys) and restored from SQL; half-made "
                 f"reservations mirrored back: {', '.join(revived) or 'none'}")


def _tokens_of(store: Any, key: str) -> list[Any]:
    """Tokens of the broker job ``key`` still stored (expired ones purged first)."""
    store.purge()
    return [t for t in store.tokens(include_expired=True)
            if t.group == key or t.owner == f"broker-{key}"]


def _token_checks(store: Any, held: list[Any], key: str) -> list[Check]:
    """Invariant 4 (an expired token starts nothing), no token left, no overbooking."""
    report = scan(store)
    startable: list[str] = []
    for token in held:
        try:
            store.start_object(token.id, lambda t: startable.append(t.id))
        except TokenInvalid:
            pass
    left = _tokens_of(store, key)
    return [Check("expired token starts nothing", not startable and bool(held),
                  f"{len(held)} dead broker tokens refused by start_object"
                  if not startable else f"started: {startable}"),
            Check("no leaked token", report.ok and not left and
                  not any(t.confirmed for t in held),
                  f"held {len(held)} unconfirmed before the kill; after expiry: "
                  f"{len(left)} left, overbooked {len(report.overbooked)}")]
