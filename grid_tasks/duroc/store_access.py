"""Per-job access to the coordination store (mixed into ``CoordinationStore``): a Redis
ACL user confined to one job's keys, and the runtime URL that carries its credentials.
Control side only: the job's processes use the URL, never these calls."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from grid_tasks.duroc.store_errors import translated

#: Keys examined per SCAN step when bounding a job's keys: few round trips even in a
#: database of 100k keys, each step still short for the server.  Measured per revoke
#: (once per coallocated job, never per launch): 0.4 ms beside no other key, 0.6 ms
#: beside 1k, 3.5 ms beside 10k; a SCAN of 100k keys takes 30-40 ms on a busy host.
SCAN_COUNT = 10_000


class AccessMixin:
    """grant_access / revoke_access; the store provides ``client``, ``keys`` and
    ``load_scripts``."""

    client: Any
    keys: Any
    load_scripts: Any

    def grant_access(self, job: str, url: str | None = None, *, scripts_loaded: bool = False,
                     remember: tuple[str, int] | None = None) -> str:
        """Create a Redis ACL user confined to this job's keys; its runtime URL.

        ``url`` is the server URL processes should reach (defaults to this
        client's); its credentials are replaced by the job user's.  The scripts are
        loaded first (the job's processes may only EVALSHA) unless ``scripts_loaded``
        (:meth:`create_job` has just done it).  ``remember=(key, seconds)`` also stores
        the runtime URL under ``key`` for that long, in the same round trip.
        """
        import secrets  # control side only: the job side need not import it

        keys = self.keys(job)
        password = secrets.token_urlsafe(24)
        if not scripts_loaded:
            self.load_scripts()
        runtime_url = _with_credentials(url or self._own_url(), keys.acl_user(), password)
        pipe = self.client.pipeline(transaction=False)
        pipe.execute_command("ACL", "SETUSER", keys.acl_user(), *keys.acl_rules(password))
        if remember is not None:
            pipe.set(remember[0], runtime_url, ex=remember[1])
        with translated(job):
            pipe.execute()
        return runtime_url

    def revoke_access(self, job: str, *, bound: bool = True) -> bool:
        """Delete the job's ACL user (and so every connection using it), then bound
        every key under its pattern by the job's deadline.

        The runtime's scripts give each key they create the deadline, but the user
        could also make keys directly (``RPUSH`` to a new name: no expiry at all);
        once the user is gone nothing can add or change one, so a single pass of
        :meth:`bound_keys` settles them (skipped with ``bound=False``: the caller
        deletes the keys itself)."""
        with translated(job):
            gone = bool(self.client.execute_command("ACL", "DELUSER",
                                                    self.keys(job).acl_user()))
        if bound:
            self.bound_keys(job)
        return gone

    def bound_keys(self, job: str) -> int:
        """Give every key of ``job`` that would outlive its deadline (or has no expiry)
        that deadline, or delete them all once it has passed; how many were changed."""
        keys = self.keys(job)
        with translated(job):
            names = list(self.client.scan_iter(match=keys.pattern, count=SCAN_COUNT))
            if not names:
                return 0
            deadline = self.client.get(keys.deadline)
            if deadline is None:  # expired (or purged): so must the rest be
                return int(self.client.delete(*names))
            seconds, micros = self.client.time()
            left_ms = int(deadline) - (seconds * 1000 + micros // 1000)
            pipe = self.client.pipeline(transaction=False)
            for name in names:
                pipe.pttl(name)
            late = [n for n, ttl in zip(names, pipe.execute()) if ttl == -1 or ttl > left_ms]
            for name in late:
                pipe.pexpireat(name, int(deadline))
            pipe.execute()
        return len(late)

    def _own_url(self) -> str:
        import redis  # a control-side (redis-py) client: redis-py is loaded already

        pool = self.client.connection_pool
        kw = pool.connection_kwargs
        if "path" in kw:
            return f"unix://{kw['path']}?db={kw.get('db', 0)}"
        # A TLS-only server has no plain port: the runtime URL must stay rediss://.
        tls = issubclass(pool.connection_class, redis.SSLConnection)
        scheme = "rediss" if tls else "redis"
        return f"{scheme}://{kw.get('host', '127.0.0.1')}:{kw.get('port', 6379)}/{kw.get('db', 0)}"


def _with_credentials(url: str, user: str, password: str) -> str:
    """``url`` with its user and password replaced."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        query = "&".join(p for p in parts.query.split("&")
                         if p and not p.startswith(("username=", "password=")))
        query = "&".join(filter(None, [query, f"username={quote(user, safe='')}",
                                       f"password={quote(password, safe='')}"]))
        return f"unix://{parts.path}?{query}"  # urlunsplit would drop the empty host
    host = parts.hostname or "127.0.0.1"
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{host}"
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
