"""Legion reservation tokens in Redis: claims on processors over time, all or nothing.

A *token* claims ``procs`` processors of one resource (``"<rm>/<node>"``) over the
half-open interval ``[start, end)`` (epoch seconds, schedule time) for one owner (a
broker attempt).  Tokens expire ``ttl`` seconds after they are taken unless they are
*confirmed*, which makes them durable claims bound to a job (the live system also
writes a durable Maui reservation in SQL through the confirm hook).

Every change is one Lua script (``EVALSHA``), so two brokers can never both hold a
slot: the reserve script checks, for every claimed resource, that live claims (durable
ones included) plus the new claims never exceed the resource's capacity at any instant
of the interval, and takes all the claims or none, naming the resource that refused.
Expiry uses the script-visible server ``TIME``, never the caller's clock.

Keys under ``<prefix>`` (default ``grid_tasks:tok``)::

    <prefix>:claims  hash  token id -> resource|start|end|procs|expiry_ms|owner|group|size
    <prefix>:cap     hash  resource -> capacity (processors); resource|span -> the longest
                           claim it held (bounds timeline reads); resource|end -> the
                           latest end of any claim it held (no timeline read for an
                           interval starting after it); |next -> a lower bound of every
                           expiry entry in the index
    <prefix>:idx     zset  every timeline and expiry, ordered by member (all scores 0):
                           ``<resource>|<end>|<id>`` per claim (end in whole seconds,
                           fixed width) and ``|<expiry ms>|<id>|<id>...`` per batch of
                           unconfirmed tokens taken or refreshed together

One index instead of a sorted set per resource and another for expiries is what makes
a reservation cheap on the server (issue 8): whatever resources it spans, it is one
ZADD.  An expiry entry is only a hint (the record says whether the token is still
unconfirmed and past its expiry), so confirm and release leave it to the purge.

A resource without a capacity refuses every claim: after a Redis restart nothing can be
reserved until :meth:`TokenStore.restore` has put back the capacities and the durable
claims (from SQL), so a lost Redis cannot lead to double booking.  Expired claims are
purged lazily (by reservations once ``|next`` has passed, by every confirm and release,
a bounded batch at a time), or all at once by :meth:`TokenStore.purge`.  The scripts
derive every key from the prefix and the resource names, so they need a standalone
Redis (not Redis Cluster).
"""


from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError
from redis.retry import Retry

from grid_tasks.errors import GridTasksError
from grid_tasks.legion.tokens_model import (  # noqa: F401 - re-exported: import from here
    _IDS, Claim, RefusalReason, Token, TokenInvalid, TokenRefused, _at, _check_name,
    _tokens, new_token_id)
from grid_tasks.node.registry import _connectivity, connect_redis

__all__ = ["DEFAULT_PREFIX", "Claim", "RefusalReason", "ScanReport", "Token", "TokenInvalid",
           "TokenRefused", "TokenStore", "new_token_id", "scan"]

DEFAULT_PREFIX = "grid_tasks:tok"
_HERE = Path(__file__).resolve().parent
_SCRIPTS = ("reserve", "confirm", "release", "purge")
T = TypeVar("T")


class TokenStore:
    """Reservation tokens in one Redis database (see the module docstring)."""

    def __init__(self, client: redis.Redis, *, prefix: str = DEFAULT_PREFIX,
                 ttl: float = 30.0) -> None:
        _check_name("key prefix", prefix)
        self.client = client
        self.prefix = prefix
        self.ttl = ttl
        self.keys = [f"{prefix}:claims", f"{prefix}:idx", f"{prefix}:cap"]
        common = (_HERE / "tokens_common.lua").read_text()
        self._scripts = {name: client.register_script(
            common + (_HERE / f"tokens_{name}.lua").read_text()) for name in _SCRIPTS}

    @classmethod
    def from_url(cls, url: str, *, prefix: str = DEFAULT_PREFIX, ttl: float = 30.0,
                 settings: Any = None, environ: Mapping[str, str] | None = None) -> "TokenStore":
        """A store on the Redis at ``url``; a ``rediss://`` URL gets the TLS options of
        ``settings`` (else of the ``GRID_TASKS_REDIS_TLS_*`` environment)."""
        client = connect_redis(url, settings=settings, environ=environ,
                               socket_connect_timeout=2, socket_timeout=5,
                               retry=Retry(NoBackoff(), 1))
        return cls(client, prefix=prefix, ttl=ttl)

    def _run(self, name: str, args: Sequence[Any]) -> Any:
        # no KEYS: the scripts derive every key from the prefix (see tokens_common.lua)
        return self._eval(name, self.prefix, *args)

    def _eval(self, name: str, *args: Any) -> Any:
        """EVALSHA of a token script, straight through the client (redis-py's Script
        wrapper costs a reservation more than the script's own argument does), loading
        it again if Redis forgot it; connection failures become ConnectivityError."""
        script = self._scripts[name]
        try:
            try:
                return self.client.execute_command("EVALSHA", script.sha, 0, *args)
            except NoScriptError:  # a restarted or flushed Redis: Script loads it again
                return script(args=list(args))
        except redis.RedisError:
            with _connectivity(self.client):
                raise

    # --- capacities -------------------------------------------------------------------

    def set_capacities(self, capacities: Mapping[str, int]) -> None:
        """Register (or update) the processors of each resource."""
        if not capacities:
            return
        for name, procs in capacities.items():
            _check_name("resource", name)
            if int(procs) < 1:
                raise GridTasksError(f"capacity of {name} must be >= 1, got {procs}")
        with _connectivity(self.client):
            self.client.hset(self.keys[2], mapping={k: int(v) for k, v in capacities.items()})

    def capacities(self) -> dict[str, int]:
        with _connectivity(self.client):
            raw = self.client.hgetall(self.keys[2])
        return {k.decode(): int(v) for k, v in raw.items() if b"|" not in k}

    # --- reserve / confirm / release ------------------------------------------------

    def take(self, claims: Sequence[Claim], owner: str, *, ttl: float | None = None) -> list[Token]:
        """Take a token for every claim, all or none; :class:`TokenRefused` if refused."""
        return self.replace((), (), claims, owner, ttl=ttl)

    def replace(self, keep: Sequence[Token], release: Sequence[Token],
                acquire: Sequence[Claim], owner: str, *,
                ttl: float | None = None) -> list[Token]:
        """A difference set in one step: refresh ``keep``, drop ``release``, take ``acquire``.

        All or nothing: when a claim does not fit (the released tokens no longer
        count against it) or a kept token has expired, nothing changes and
        :class:`TokenRefused` says why.  Returns the new tokens.
        """
        return self._reserve(keep, release, acquire, owner, ttl, confirmed=False, force=False)

    def _reserve(self, keep: Sequence[Token], release: Sequence[Token],
                 acquire: Sequence[Claim], owner: str, ttl: float | None, *,
                 confirmed: bool, force: bool, ids: Sequence[str] | None = None) -> list[Token]:
        _check_name("owner", owner)
        ttl_ms = max(1, int(1000 * (self.ttl if ttl is None else ttl)))
        # ids travel NUL-terminated in one argument; generated ones hold no '|' or NUL
        ids = _IDS.take(len(acquire)) if ids is None else list(ids)
        if force or keep or release:
            for token_id in [*ids, *(t.id for t in keep), *(t.id for t in release)]:
                _check_name("token id", token_id)
        header = (f"{self.prefix}|{ttl_ms}|{owner}|{int(confirmed)}|{int(force)}|{len(keep)}|"
                  f"{len(release)}|{len(acquire)}|")
        parts = [f"{t.id}\0" for t in (*keep, *release)] if keep or release else []
        parts += [token_id + c._wire for token_id, c in zip(ids, acquire)]
        # the fields NUL-terminated in one argument (see the script)
        result = self._eval("reserve", header, "".join(parts))
        if isinstance(result, list):  # refused; success is the bare server time
            reason, subject, index, peak, cap = result
            raise TokenRefused(RefusalReason(reason.decode()), subject.decode(), int(index),
                               int(peak), int(cap))
        return _tokens(ids, acquire, owner, None if confirmed else int(result) + ttl_ms)

    def confirm(self, tokens: Sequence[Token], job: str,
                hook: Callable[[Sequence[Token]], None] | None = None) -> list[Token]:
        """Make ``tokens`` durable claims bound to ``job``, all at once.

        ``hook(tokens)`` runs first (the live system writes the durable Maui
        reservation there); if it raises, nothing is confirmed.  Raises
        :class:`TokenRefused` (EXPIRED/GONE) when any token is no longer held.
        """
        _check_name("job", job)
        if hook is not None:
            hook(tokens)
        result = self._run("confirm", [job, *(t.id for t in tokens)])
        if int(result[0]) != 1:
            raise TokenRefused(RefusalReason(result[1].decode()), result[2].decode())
        return [Token(t.id, t.resource, t.start, t.end, t.procs, job, job, len(tokens), None)
                for t in tokens]

    def release(self, tokens: Iterable[Token | str]) -> int:
        """Release tokens (objects or ids); returns how many were still held."""
        ids = [t if isinstance(t, str) else t.id for t in tokens]
        return int(self._run("release", ids)) if ids else 0

    def mirror(self, claims: Sequence[Claim], job: str, ids: Sequence[str]) -> list[Token]:
        """Record durable claims (e.g. Maui reservations from SQL) without a capacity check."""
        return self._reserve((), (), claims, job, None, confirmed=True, force=True, ids=ids)

    def restore(self, capacities: Mapping[str, int],
                durable: Iterable[tuple[str, Sequence[str], Sequence[Claim]]]) -> None:
        """Rebuild after Redis lost its state: durable claims first, then capacities.

        ``durable`` yields ``(job, token_ids, claims)``.  Claims already present are kept.
        """
        for job, ids, claims in durable:
            with _connectivity(self.client):
                present = self.client.hmget(self.keys[0], list(ids)) if ids else []
            if any(p is None for p in present):  # re-mirror the whole group, sized right
                self.release(list(ids))
                self.mirror(list(claims), job, list(ids))
        self.set_capacities(capacities)

    def purge(self) -> int:
        """Remove every expired token now; returns how many."""
        return int(self._run("purge", [500]))

    # --- reading ------------------------------------------------------------------------

    def server_ms(self) -> int:
        with _connectivity(self.client):
            sec, usec = self.client.time()
        return sec * 1000 + usec // 1000

    def get(self, token_id: str) -> Token | None:
        with _connectivity(self.client):
            raw = self.client.hget(self.keys[0], token_id)
        return None if raw is None else Token.parse(token_id, raw)

    def check(self, token_id: str) -> Token:
        """The token if it is held now; :class:`TokenInvalid` if expired, released or unknown."""
        with _connectivity(self.client):
            pipe = self.client.pipeline(transaction=False)
            pipe.hget(self.keys[0], token_id)
            pipe.time()
            raw, (sec, usec) = pipe.execute()
        if raw is None:
            raise TokenInvalid(token_id, "released, expired and purged, or never issued")
        token = Token.parse(token_id, raw)
        if token.expires_ms is not None and token.expires_ms <= sec * 1000 + usec // 1000:
            raise TokenInvalid(token_id, "expired before it was confirmed")
        return token

    def start_object(self, token_id: str, launch: Callable[[Token], T]) -> T:
        """Legion's ``start_object(token)``: validate the token, then ``launch(token)``."""
        return launch(self.check(token_id))

    def snapshot(self) -> tuple[list[Token], int]:
        """Every stored token (expired ones included) and the server time, read atomically."""
        with _connectivity(self.client):  # one MULTI: claims and clock seen at one instant
            pipe = self.client.pipeline(transaction=True)
            pipe.hgetall(self.keys[0])
            pipe.time()
            raw, (sec, usec) = pipe.execute()
        found = [Token.parse(k.decode(), v) for k, v in raw.items()]
        return sorted(found, key=lambda t: (t.resource, t.start, t.id)), sec * 1000 + usec // 1000

    def tokens(self, include_expired: bool = False) -> list[Token]:
        """Every token held, sorted by resource then start."""
        found, now = self.snapshot()
        if include_expired:
            return found
        return [t for t in found if t.expires_ms is None or t.expires_ms > now]

    def timeline_sizes(self) -> dict[str, int]:
        """Entries per resource timeline (for leak checks); resources with none omitted."""
        sizes: dict[str, int] = {}
        with _connectivity(self.client):
            for entry, _ in self.client.zscan_iter(self.keys[1], count=1000):
                resource = entry.split(b"|", 1)[0]
                if resource:  # expiry entries start with '|'
                    name = resource.decode()
                    sizes[name] = sizes.get(name, 0) + 1
        return sizes

    def index_size(self) -> int:
        """Entries in the index, timelines and expiry hints together (for leak checks:
        once every expiry has passed and :meth:`purge` ran, one per token held)."""
        with _connectivity(self.client):
            return int(self.client.zcard(self.keys[1]))


@dataclass(frozen=True)
class ScanReport:
    """A check of every resource's timeline: capacity and whole confirmed groups."""

    capacities: dict[str, int]
    peaks: dict[str, int]                      # resource -> highest use at any instant
    overbooked: list[tuple[str, float, int, int]]  # (resource, instant, use, capacity)
    broken_groups: list[tuple[str, int, int]]  # (job, confirmed tokens, expected size)
    live: int
    confirmed: int
    expired_unpurged: int

    @property
    def ok(self) -> bool:
        return not self.overbooked and not self.broken_groups

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "capacities": self.capacities, "peaks": self.peaks,
                "overbooked": [list(o) for o in self.overbooked],
                "broken_groups": [list(b) for b in self.broken_groups], "live": self.live,
                "confirmed": self.confirmed, "expired_unpurged": self.expired_unpurged}


def scan(store: TokenStore) -> ScanReport:
    """Sweep every resource's live claims: never above capacity; confirmed groups whole."""
    capacities = store.capacities()
    everything, now = store.snapshot()
    live = [t for t in everything if t.expires_ms is None or t.expires_ms > now]
    by_resource: dict[str, list[Token]] = {}
    groups: dict[str, list[Token]] = {}
    for token in live:
        by_resource.setdefault(token.resource, []).append(token)
        if token.confirmed:
            groups.setdefault(token.group, []).append(token)
    peaks: dict[str, int] = {}
    overbooked = []
    for resource, tokens in by_resource.items():
        events = sorted([(t.start, 1, t.procs) for t in tokens]
                        + [(t.end, 0, -t.procs) for t in tokens])
        use = top = 0
        cap = capacities.get(resource, 0)
        for at, _, delta in events:  # ends (0) sort before starts (1) at one instant
            use += delta
            top = max(top, use)
            if use > cap:
                overbooked.append((resource, at, use, cap))
        peaks[resource] = top
    broken = [(job, len(ts), ts[0].size) for job, ts in groups.items()
              if any(t.size != len(ts) for t in ts)]
    return ScanReport(capacities, peaks, overbooked, broken, len(live),
                      sum(1 for t in live if t.confirmed), len(everything) - len(live))
