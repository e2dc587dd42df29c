"""The coordination store of coallocated jobs: structure, start barrier, messages, access.

The one place that knows the Redis layout of a DUROC job (see
:mod:`grid_tasks.duroc.store_keys`).  The control side creates a job, adds and
deletes subjobs, awaits barrier entries, releases or aborts, grants a per-job
runtime URL and purges everything at the end; the job's processes (through
:mod:`grid_tasks.runtime`) enter the barrier, join the inter-subjob group and
exchange tagged messages.  Atomic changes are Lua scripts run by EVALSHA; waits
block on the job's event stream (``XREAD BLOCK``) or a message list (``BLPOP``),
never by polling the state.

The control side's life of a job, in store calls::

    store = CoordinationStore.from_settings(settings)   # TLS options of settings
    store.create_job(job, [SubjobSpec("left", 2), SubjobSpec("right", 3)])
    url = store.grant_access(job)                  # confined to this job's keys
    env = runtime_environment(url, job, address, label)   # -> the launcher's extra_env
    store.await_entries(job, [address], timeout)   # one chord header task per subjob
    store.release(job)                             # the chord body
    store.abort(job, "subjob 'right' failed: ...") # the chord's error path / cancel
    store.purge(job)                               # at the end: keys and ACL user gone

Blocking waits are cut into slices of at most ``slice_s`` seconds so that a job
purged or expired under a waiter is noticed (``JobNotFoundError``) instead of
blocking forever; events are never missed between slices because every wait
resumes from the last stream id it saw.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from grid_tasks.duroc import store_scripts as scripts
from grid_tasks.duroc.store_access import AccessMixin
from grid_tasks.duroc.store_errors import (
    BarrierAbortedError, BarrierTimeoutError, JobNotFoundError, RuntimeMisuseError,
    StoreUnavailableError, SubjobNotFoundError, translated,
)
from grid_tasks.duroc.store_keys import PREFIX, JobKeys
from grid_tasks.duroc.store_messages import MessagingMixin
from grid_tasks.duroc.store_models import (
    BarrierState, JobSnapshot, JobStructure, SubjobInfo, SubjobSpec,
)

if TYPE_CHECKING:  # the job side never imports redis-py (see grid_tasks.duroc.resp)
    import redis

    from grid_tasks.duroc.resp import RespClient

T = TypeVar("T")
DEFAULT_TTL_S = 24 * 3600.0
SLICE_S = 2.0

_SCRIPT_NAMES = ("CREATE", "ADD", "DELETE", "ENTER", "SNAPSHOT", "RELEASE", "ABORT", "JOIN",
                 "SEND", "PURGE")


RECHECK = object()  # an event that calls for re-reading the state


def _completed(snap: JobSnapshot, chosen: set[int] | None) -> JobSnapshot:
    """``snap`` with the awaited subjobs shown complete (their "complete" events came)."""
    subjobs = tuple(replace(s, entered=s.size)
                    if (s.address in chosen if chosen is not None else s.in_barrier) else s
                    for s in snap.subjobs)
    return replace(snap, subjobs=subjobs)


def _decode(raw: Any) -> Any:
    return json.loads(raw.decode() if isinstance(raw, bytes) else raw)


class CoordinationStore(AccessMixin, MessagingMixin):
    """Coordination state of coallocated jobs in one Redis database.

    ``client`` is a redis-py client (control side, :meth:`from_url`) or a
    :class:`~grid_tasks.duroc.resp.RespClient` (the job side, which must not pay
    redis-py's import).  Thread-safe: both give each concurrent command its own
    pooled connection.
    """

    def __init__(self, client: redis.Redis | RespClient, *, prefix: str = PREFIX,
                 slice_s: float = SLICE_S) -> None:
        self.client = client
        self.prefix = prefix
        self.slice_s = slice_s
        self._scripts = {name: client.register_script(getattr(scripts, name))
                         for name in _SCRIPT_NAMES}

    @classmethod
    def from_url(cls, url: str, *, environ: Mapping[str, str] | None = None,
                 settings: Any = None, **kwargs: Any) -> "CoordinationStore":
        """A store on the Redis at ``url`` (admin URL, or a job's runtime URL).

        A ``rediss://`` URL gets the TLS options of ``settings.redis_tls`` when
        ``settings`` is given, else the ``GRID_TASKS_REDIS_TLS_*`` variables of
        ``environ`` (default: this process's environment).
        """
        from grid_tasks.node.registry import connect_redis

        try:
            client = connect_redis(url, settings=settings, environ=environ,
                                   socket_connect_timeout=5, health_check_interval=30)
        except ValueError as exc:
            raise StoreUnavailableError(f"bad coordination store URL: {exc}") from None
        return cls(client, **kwargs)

    @classmethod
    def from_settings(cls, settings: Any, **kwargs: Any) -> "CoordinationStore":
        """A store on ``settings.redis_url`` with the TLS options of ``settings``."""
        return cls.from_url(settings.redis_url, settings=settings, **kwargs)

    def close(self) -> None:
        self.client.close()

    def keys(self, job: str) -> JobKeys:
        return JobKeys(job, self.prefix)

    def _run(self, name: str, job: str, *args: Any, extra_keys: Sequence[str] = ()) -> Any:
        keys = self.keys(job)
        with translated(job):
            return self._scripts[name](keys=[*keys.fixed, *extra_keys],
                                       args=[keys.base, *args])

    def load_scripts(self) -> None:
        """Load every script into the server cache (runtime users may only EVALSHA).

        One ``SCRIPT EXISTS`` round trip when they are cached already (the usual case:
        this runs before every job creation), a ``SCRIPT LOAD`` only for missing ones.
        """
        scripts_ = list(self._scripts.values())
        with translated(None):
            present = self.client.script_exists(*[s.sha for s in scripts_])
            for script, cached in zip(scripts_, present):
                if not cached:
                    self.client.script_load(script.script)

    # -- structure (control side) ------------------------------------------------------

    def create_job(self, job: str, subjobs: Sequence[SubjobSpec], *,
                   ttl_s: float = DEFAULT_TTL_S, auto_release: bool = False) -> JobStructure:
        """Create a job's barrier with its first subjobs (addresses 0, 1, ... in order).

        Every key of the job expires ``ttl_s`` seconds from now unless purged earlier.
        With ``auto_release`` the barrier releases itself, atomically, as soon as every
        process of every barrier subjob has entered (by the entry, or the deletion of
        a subjob, that completes it); otherwise only :meth:`release` opens it.
        """
        if ttl_s <= 0:
            raise RuntimeMisuseError(f"ttl_s must be positive, not {ttl_s!r}", job=job)
        expire_at_ms = int((time.time() + ttl_s) * 1000)
        payload = json.dumps([spec.to_json() for spec in subjobs])
        return JobStructure.from_json(job, _decode(self._create(
            job, expire_at_ms, payload, "1" if auto_release else "0")))

    def _create(self, job: str, *args: Any) -> Any:
        """CREATE by EVALSHA: one round trip.  The server's script cache is all or
        nothing (a restart or SCRIPT FLUSH empties it), so CREATE missing means every
        script is: all are loaded then, before any runtime user (EVALSHA only) needs one."""
        from redis.exceptions import NoScriptError  # control side: redis-py is loaded

        keys = self.keys(job)
        argv = [len(keys.fixed), *keys.fixed, keys.base, *args]
        with translated(job):
            try:
                return self.client.evalsha(self._scripts["CREATE"].sha, *argv)
            except NoScriptError:
                self.load_scripts()
                return self.client.evalsha(self._scripts["CREATE"].sha, *argv)

    def add_subjob(self, job: str, spec: SubjobSpec) -> SubjobInfo:
        """Add a subjob before release; it joins the same barrier under a new address."""
        data = _decode(self._run("ADD", job, json.dumps(spec.to_json())))
        return JobStructure.from_json(job, data["structure"]).subjob(int(data["address"]))

    def delete_subjob(self, job: str, label: str) -> JobStructure:
        """Delete a subjob (and its barrier entries) before release; the new structure."""
        return JobStructure.from_json(job, _decode(self._run("DELETE", job, label)))

    def snapshot(self, job: str) -> JobSnapshot:
        """State, subjobs and barrier entry counts, read atomically."""
        return JobSnapshot.from_json(job, _decode(self._run("SNAPSHOT", job)))

    def queue_snapshot(self, pipe: Any, job: str) -> None:
        """Add the job's SNAPSHOT to ``pipe`` (a redis-py pipeline on this store's client)
        by EVALSHA: a registered script would make the pipeline ask SCRIPT EXISTS first.
        Its reply goes to :meth:`snapshot_from`."""
        keys = self.keys(job)
        pipe.evalsha(self._scripts["SNAPSHOT"].sha, len(keys.fixed), *keys.fixed, keys.base)

    def snapshot_from(self, job: str, reply: Any) -> JobSnapshot:
        """The snapshot a queued SNAPSHOT replied; an error reply (script cache empty,
        job gone) is settled by :meth:`snapshot` itself, with its typed errors."""
        if isinstance(reply, Exception):
            return self.snapshot(job)
        return JobSnapshot.from_json(job, _decode(reply))

    def structure(self, job: str) -> JobStructure:
        """The current structure (the frozen one once released)."""
        snap = self.snapshot(job)
        return JobStructure(job, snap.version, tuple(
            SubjobInfo(s.address, s.label, s.size, s.start_type, s.comms_type)
            for s in snap.subjobs))

    # -- barrier (control side) ---------------------------------------------------------

    def await_entries(self, job: str, addresses: Sequence[int] | None = None,
                      timeout: float | None = None) -> JobSnapshot:
        """Block until every process of the chosen subjobs entered the barrier.

        ``addresses`` defaults to every barrier subjob of the current structure
        (re-evaluated when subjobs are added or deleted).  Returns the snapshot that
        showed them complete, or the first one after a release.  Raises
        :class:`BarrierAbortedError`, :class:`BarrierTimeoutError`,
        :class:`SubjobNotFoundError` (an awaited subjob was deleted).
        """
        chosen = None if addresses is None else {int(a) for a in addresses}
        latest: dict[str, Any] = {}

        def check() -> tuple[JobSnapshot | None, str]:
            snap = self.snapshot(job)
            if snap.state is BarrierState.ABORTED:
                raise BarrierAbortedError(f"aborted: {snap.reason}", job=job,
                                          reason=snap.reason)
            known = {s.address for s in snap.subjobs}
            if chosen is not None and not chosen <= known:
                raise SubjobNotFoundError(f"no subjob at address {min(chosen - known)}",
                                          job=job)
            latest["snap"], latest["pending"] = snap, {s.address for s in snap.pending(chosen)}
            done = snap.state is BarrierState.RELEASED or not latest["pending"]
            return (snap if done else None), snap.last_event

        def on_event(fields: dict[bytes, bytes]) -> Any:
            # a "complete" event settles one pending subjob without another round trip
            if fields.get(b"type") != b"complete":
                return RECHECK
            latest["pending"].discard(int(fields[b"address"]))
            return None if latest["pending"] else _completed(latest["snap"], chosen)

        return self._wait(job, check, timeout, on_event,
                          f"barrier entries not complete after {timeout} s")

    def release(self, job: str, *, require_complete: bool = True) -> JobStructure:
        """Release the barrier once, atomically freezing and publishing the structure.

        With ``require_complete`` every barrier subjob must have fully entered
        (:class:`BarrierNotReadyError` otherwise).  Releasing again returns the same
        frozen structure; releasing an aborted job raises :class:`BarrierAbortedError`.
        """
        data = _decode(self._run("RELEASE", job, "1" if require_complete else "0"))
        return JobStructure.from_json(job, data["structure"])

    def abort(self, job: str, reason: str) -> bool:
        """Abort (cancel) the job: waiting and future barrier entries fail with ``reason``.

        True if this call aborted it, False if it already was.
        """
        return bool(self._run("ABORT", job, reason or "aborted"))

    # -- runtime side --------------------------------------------------------------------

    def enter(self, job: str, address: int, rank: int,
              size: int | None = None) -> dict[str, Any]:
        """Record ``rank`` of subjob ``address`` in the barrier (idempotent); the raw reply.

        ``size``, when given, must equal the subjob's declared process count.
        """
        return _decode(self._run("ENTER", job, str(int(address)), str(int(rank)),
                                 "" if size is None else str(int(size))))

    def wait_release(self, job: str, address: int, rank: int, timeout: float | None = None,
                     size: int | None = None) -> JobStructure | None:
        """Enter the barrier and block until release; the frozen structure.

        Returns None at once for a ``no-barrier`` subjob before release.  Raises
        :class:`BarrierAbortedError` if the job is or gets aborted, and
        :class:`BarrierTimeoutError` after ``timeout`` seconds.
        """
        def check() -> tuple[JobStructure | None, str]:
            # entering again is harmless (idempotent) and re-reads the state atomically
            reply = self.enter(job, address, rank, size)
            if reply["state"] == BarrierState.ABORTED.value:
                reason = reply.get("reason") or ""
                raise BarrierAbortedError(f"aborted: {reason}", job=job, reason=reason)
            if reply["state"] == BarrierState.RELEASED.value:
                return JobStructure.from_json(job, reply["structure"]), ""
            if reply["state"] == "no-barrier":
                return None, ""
            return None, reply["last"]

        def on_event(fields: dict[bytes, bytes]) -> Any:
            if fields.get(b"type") == b"released" and b"structure" in fields:
                return JobStructure.from_json(job, _decode(fields[b"structure"]))
            return RECHECK if fields.get(b"type") == b"aborted" else None

        return self._wait(job, check, timeout, on_event,
                          f"barrier not released after {timeout} s", allow_none=True)

    def join_group(self, job: str, address: int,
                   timeout: float | None = None) -> JobStructure:
        """Join the inter-subjob group as rank 0 of ``address``; blocks until all joined.

        Waits for the release first (the group is the frozen structure's
        ``blocking-join`` subjobs).  :class:`NotInGroupError` for an independent subjob.
        """
        def check() -> tuple[JobStructure | None, str]:
            reply = _decode(self._run("JOIN", job, str(int(address))))
            if reply["state"] == BarrierState.ABORTED.value:
                reason = reply.get("reason") or ""
                raise BarrierAbortedError(f"aborted: {reason}", job=job, reason=reason)
            if reply["state"] == "joined":
                return JobStructure.from_json(job, reply["structure"]), ""
            return None, reply["last"]

        wanted = {b"released", b"aborted", b"group"}
        return self._wait(job, check, timeout,
                          lambda f: RECHECK if f.get(b"type") in wanted else None,
                          f"inter-subjob group incomplete after {timeout} s")

    def _wait(self, job: str, check: Callable[[], tuple[T | None, str]],
              timeout: float | None, on_event: Callable[[dict[bytes, bytes]], Any],
              timeout_message: str, allow_none: bool = False) -> T:
        """Evaluate ``check``; while undecided, block on the event stream.

        ``check`` returns (result, last stream id); a result (or an empty id, when
        ``allow_none``) ends the wait.  ``on_event`` maps each new event to None
        (irrelevant), :data:`RECHECK` (call ``check`` again) or the result itself.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        events = self.keys(job).events
        while True:
            result, last = check()
            if result is not None or (allow_none and not last):
                return result  # type: ignore[return-value]
            while True:
                remaining = self._remaining(deadline, job, timeout_message)
                block_ms = max(1, int(min(remaining, self.slice_s) * 1000))
                with translated(job):
                    reply = self.client.xread({events: last}, block=block_ms)
                if not reply:
                    self._ensure_exists(job)
                    continue
                entries = reply[0][1]
                last = entries[-1][0]
                decisions = [on_event(fields) for _, fields in entries]
                if RECHECK in decisions:
                    break
                found = [d for d in decisions if d is not None]
                if found:
                    return found[0]

    def _remaining(self, deadline: float | None, job: str, message: str) -> float:
        if deadline is None:
            return self.slice_s
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BarrierTimeoutError(message, job=job)
        return remaining

    def _ensure_exists(self, job: str) -> None:
        with translated(job):
            if not self.client.exists(self.keys(job).meta):
                raise JobNotFoundError("coordination state vanished (purged or expired)",
                                       job=job)

    # -- access and cleanup (control side) -------------------------------------------------

    def purge(self, job: str) -> int:
        """Delete every key of the job and its ACL user; the number of keys deleted.

        The user goes first, so no key can be made meanwhile; keys it made outside
        the runtime's scripts are deleted by :meth:`bound_keys` (the deadline is gone)."""
        self.revoke_access(job, bound=False)
        count = int(self._run("PURGE", job))
        return count + self.bound_keys(job)
