"""Redis connection failures turned into a one-line
:class:`~grid_tasks.errors.ConnectivityError` (for the node registry and the token
store): where, and why - refused credentials, an unreachable server, a configured TLS
file that is missing."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import redis

from grid_tasks.errors import ConnectivityError


class connectivity:
    """Turns redis connection failures into a one-line :class:`ConnectivityError`.

    ``with connectivity(client): ...`` around any command of ``client``.
    """

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if exc_type is None:
            return False
        kw = self.client.connection_pool.connection_kwargs
        where = kw.get("path") or f"{kw.get('host')}:{kw.get('port')}"
        text = str(exc).lower()
        if issubclass(exc_type, redis.AuthenticationError) or (
                issubclass(exc_type, redis.ResponseError) and ("auth" in text
                                                                or "password" in text)):
            raise ConnectivityError(f"Redis at {where} refused the credentials: {exc}") from None
        if issubclass(exc_type, (redis.ConnectionError, redis.TimeoutError)):
            raise ConnectivityError(f"cannot reach Redis at {where}: {exc}"
                                    f"{_missing_tls_files(kw)}") from None
        return False


def _missing_tls_files(kw: Mapping[str, Any]) -> str:
    """' (TLS file(s) not found: ...)' when configured TLS files are missing, else ''.

    redis-py reports a missing CA, certificate or key file as a bare ENOENT.
    """
    missing = [f"{name}={kw[key]}" for name, key in (("ca", "ssl_ca_certs"),
                                                      ("cert", "ssl_certfile"),
                                                      ("key", "ssl_keyfile"))
               if kw.get(key) and not os.path.exists(kw[key])]
    return f" (TLS file(s) not found: {', '.join(missing)})" if missing else ""

