"""Security settings: message signing and Redis TLS, read from ``GRID_TASKS_*``.

==================================  ==============================================
variable                            meaning (default)
==================================  ==============================================
``GRID_TASKS_SIGNING``              signs every task message (``auth``
                                    serializer) and refuses unsigned ones (``1``);
                                    ``0`` turns it off, for a closed test bench
``GRID_TASKS_SIGNING_KEY``          this process's RSA private key, PEM
                                    (``<state dir>/keys/worker.key``)
``GRID_TASKS_SIGNING_CERT``         its certificate (``<state dir>/keys/worker.pem``)
``GRID_TASKS_SIGNING_CERT_STORE``   directory of the trusted signers' certificates
                                    (``<state dir>/keys/certs``)
``GRID_TASKS_REDIS_TLS_CA``         CA bundle of the Redis server (system CAs)
``GRID_TASKS_REDIS_TLS_CERT``       client certificate, for ``tls-auth-clients``
``GRID_TASKS_REDIS_TLS_KEY``        its private key
``GRID_TASKS_REDIS_TLS_CERT_REQS``  ``required`` / ``optional`` / ``none``
                                    (``required``)
``GRID_TASKS_GRIDMAP``              grid map file; unset: no authorization
``GRID_TASKS_SINGLE_USER``          ``1``: a one-user grid without grid map, whose
                                    node daemons run jobs as their own account
                                    even as root (the embedded stack) (``0``)
==================================  ==============================================

The TLS options apply to every ``rediss://`` URL (broker, result backend, token
store); a plain ``redis://`` URL ignores them.  Passwords and ACL users go in the
URLs themselves: ``redis://user:password@host:port/db``.  Make keys with
``grid-tasks keys init``.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from grid_tasks.errors import ConfigError

PREFIX = "GRID_TASKS_"
KEYS_DIR = "keys"
KEY_FILE = "worker.key"
CERT_FILE = "worker.pem"
STORE_DIR = "certs"


class CertReqs(str, Enum):
    """How strictly the Redis server's certificate is checked."""

    REQUIRED = "required"
    OPTIONAL = "optional"
    NONE = "none"

    @property
    def ssl_constant(self) -> ssl.VerifyMode:
        return {"required": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL,
                "none": ssl.CERT_NONE}[self.value]


@dataclass(frozen=True)
class SigningSettings:
    """Celery message signing: on/off and the key, certificate and trusted store."""

    enabled: bool = False
    key: Path | None = None
    cert: Path | None = None
    cert_store: Path | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str], state_dir: Path) -> "SigningSettings":
        """Read ``GRID_TASKS_SIGNING*``; paths default into ``<state_dir>/keys``."""
        keys = state_dir / KEYS_DIR
        return cls(
            enabled=flag(env, "SIGNING", default="1"),  # secure by default
            key=_path(env, "SIGNING_KEY", keys / KEY_FILE),
            cert=_path(env, "SIGNING_CERT", keys / CERT_FILE),
            cert_store=_path(env, "SIGNING_CERT_STORE", keys / STORE_DIR),
        )

    def to_env(self) -> dict[str, str]:
        env = {PREFIX + "SIGNING": "1" if self.enabled else "0"}
        for name, value in (("SIGNING_KEY", self.key), ("SIGNING_CERT", self.cert),
                            ("SIGNING_CERT_STORE", self.cert_store)):
            if value is not None:
                env[PREFIX + name] = str(value)
        return env

    def check_files(self) -> None:
        """Raise :class:`ConfigError` naming the variable of a missing file."""
        for name, value, want_dir in (("SIGNING_KEY", self.key, False),
                                      ("SIGNING_CERT", self.cert, False),
                                      ("SIGNING_CERT_STORE", self.cert_store, True)):
            if value is None:
                raise _bad(name, "", "required when GRID_TASKS_SIGNING=1")
            ok = value.is_dir() if want_dir else value.is_file()
            if not ok:
                kind = "directory" if want_dir else "file"
                raise _bad(name, str(value), f"no such {kind}; make one with "
                                             "`grid-tasks keys init`")


@dataclass(frozen=True)
class RedisTLS:
    """TLS options for ``rediss://`` connections (broker, backend, token store)."""

    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    cert_reqs: CertReqs = CertReqs.REQUIRED

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "RedisTLS":
        raw = (env.get(PREFIX + "REDIS_TLS_CERT_REQS") or "required").strip().lower()
        try:
            reqs = CertReqs(raw)
        except ValueError:
            raise _bad("REDIS_TLS_CERT_REQS", raw,
                       "expected one of required, optional, none") from None
        tls = cls(_path(env, "REDIS_TLS_CA", None), _path(env, "REDIS_TLS_CERT", None),
                  _path(env, "REDIS_TLS_KEY", None), reqs)
        if (tls.cert is None) != (tls.key is None):
            raise _bad("REDIS_TLS_KEY" if tls.key is None else "REDIS_TLS_CERT", "",
                       "GRID_TASKS_REDIS_TLS_CERT and GRID_TASKS_REDIS_TLS_KEY go together")
        return tls

    def to_env(self) -> dict[str, str]:
        env = {PREFIX + "REDIS_TLS_CERT_REQS": self.cert_reqs.value}
        for name, value in (("REDIS_TLS_CA", self.ca), ("REDIS_TLS_CERT", self.cert),
                            ("REDIS_TLS_KEY", self.key)):
            if value is not None:
                env[PREFIX + name] = str(value)
        return env

    def redis_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``redis.Redis`` / ``redis.SSLConnection``.

        The same dict is what kombu's ``broker_use_ssl`` and Celery's
        ``redis_backend_use_ssl`` expect for Redis.
        """
        kwargs: dict[str, Any] = {"ssl_cert_reqs": self.cert_reqs.ssl_constant,
                                  # a hostname check without verification is meaningless
                                  "ssl_check_hostname": self.cert_reqs is CertReqs.REQUIRED}
        if self.ca is not None:
            kwargs["ssl_ca_certs"] = str(self.ca)
        if self.cert is not None:
            kwargs["ssl_certfile"] = str(self.cert)
        if self.key is not None:
            kwargs["ssl_keyfile"] = str(self.key)
        return kwargs

    def ssl_context(self) -> ssl.SSLContext:
        """A client ``SSLContext`` with these options, built as redis-py builds its own
        (system CAs plus ``ca``); for clients other than redis-py (the job runtime's)."""
        context = ssl.create_default_context()
        context.check_hostname = self.cert_reqs is CertReqs.REQUIRED  # before verify_mode
        context.verify_mode = self.cert_reqs.ssl_constant
        if self.cert is not None:
            context.load_cert_chain(str(self.cert), str(self.key))
        if self.ca is not None:
            context.load_verify_locations(str(self.ca))
        return context


def is_tls_url(url: str) -> bool:
    """True for ``rediss://`` URLs (TLS to Redis)."""
    return url.lower().startswith("rediss://")


def gridmap_from_env(env: Mapping[str, str]) -> Path | None:
    """``GRID_TASKS_GRIDMAP`` as a path, or None (authorization off)."""
    return _path(env, "GRIDMAP", None)


def _bad(name: str, value: str, why: str) -> ConfigError:
    return ConfigError(f"{PREFIX}{name}={value!r}: {why}", source="environment",
                       key=PREFIX + name)


def flag(env: Mapping[str, str], name: str, default: str = "0") -> bool:
    """``GRID_TASKS_<name>`` as a boolean; :class:`ConfigError` naming it if malformed."""
    raw = (env.get(PREFIX + name) or default).strip().lower()
    if raw in {"1", "true", "yes", "on"}:
        return True
    if raw in {"0", "false", "no", "off", ""}:
        return False
    raise _bad(name, raw, "expected 1/0, true/false, yes/no or on/off")


def _path(env: Mapping[str, str], name: str, default: Path | None) -> Path | None:
    raw = env.get(PREFIX + name)
    if raw is None or raw.strip() == "":
        return default
    return Path(raw.strip()).expanduser()
