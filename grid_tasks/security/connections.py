"""Configured Redis clients: password or ACL user from the URL, TLS from settings.

Every component that talks to Redis (token store, locks, heartbeats, DUROC
store) should build its client with :func:`redis_client` instead of
``redis.Redis.from_url``, so ``rediss://`` URLs get the ``GRID_TASKS_REDIS_TLS_*``
options::

    from grid_tasks.security.connections import redis_client
    client = redis_client(settings)                  # settings.redis_url
    client = redis_client(settings, settings.broker_url, socket_timeout=5)

:func:`check_redis` pings once and turns a refused password, an unknown ACL
user, a failed TLS handshake or an unreachable server into a one-line
:class:`~grid_tasks.errors.ConnectivityError` with the password masked.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis

from grid_tasks.errors import ConnectivityError
from grid_tasks.security.config import RedisTLS, is_tls_url


def redis_kwargs(url: str, tls: RedisTLS) -> dict[str, Any]:
    """Extra ``redis.Redis.from_url`` keyword arguments for ``url`` (TLS if ``rediss://``)."""
    return tls.redis_kwargs() if is_tls_url(url) else {}


def redis_client(settings: Any, url: str | None = None, **kwargs: Any) -> redis.Redis:
    """A ``redis.Redis`` for ``url`` (default ``settings.redis_url``), TLS options applied.

    ``settings`` is a :class:`grid_tasks.settings.Settings`; ``kwargs`` go to
    ``redis.Redis.from_url`` and win over the TLS defaults (``connection_pool_class``:
    the pool's class, which then takes the pool options such as ``max_connections``).
    """
    url = url or settings.redis_url
    tls = getattr(settings, "redis_tls", None) or RedisTLS()
    options = {**redis_kwargs(url, tls), **kwargs}
    pool_class = options.pop("connection_pool_class", None)
    if pool_class is not None:  # e.g. a BlockingConnectionPool (redis-py's from_url has no say)
        return redis.Redis(connection_pool=pool_class.from_url(url, **options))
    return redis.Redis.from_url(url, **options)


def check_redis(settings: Any, url: str | None = None, timeout: float = 3.0) -> None:
    """Ping Redis once; raise a one-line :class:`ConnectivityError` saying why it failed."""
    url = url or settings.redis_url
    client = redis_client(settings, url, socket_connect_timeout=timeout,
                          socket_timeout=timeout)
    try:
        client.ping()
    except redis.AuthenticationError as exc:
        raise ConnectivityError(f"Redis at {mask_url(url)} refused the credentials"
                                f"{_user_words(url)}: {_first_line(exc)}") from None
    except redis.ResponseError as exc:
        if "NOAUTH" in str(exc) or "NOPERM" in str(exc):
            raise ConnectivityError(f"Redis at {mask_url(url)} requires other credentials"
                                    f"{_user_words(url)}: {_first_line(exc)}") from None
        raise ConnectivityError(f"Redis at {mask_url(url)}: {_first_line(exc)}") from None
    except redis.RedisError as exc:
        raise ConnectivityError(f"cannot reach Redis at {mask_url(url)}: "
                                f"{_first_line(exc)}") from None
    finally:
        client.close()


def mask_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (the user name is kept)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def _user_words(url: str) -> str:
    user = urlsplit(url).username
    return f" of ACL user {user!r}" if user else " (default user)"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
