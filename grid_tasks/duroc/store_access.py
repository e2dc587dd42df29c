"""Per-job access to the coordination store (mixed into ``CoordinationStore``): a Redis
ACL user confined to one job's keys, and the runtime URL that carries its credentials.
Control side only: the job's processes use the URL, never these calls."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from grid_tasks.duroc.store_errors import translated


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

    def revoke_access(self, job: str) -> bool:
        """Delete the job's ACL user (and so every connection using it)."""
        with translated(job):
            return bool(self.client.execute_command("ACL", "DELUSER",
                                                    self.keys(job).acl_user()))

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
