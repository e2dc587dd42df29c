"""Runtime settings: ``GRID_TASKS_*`` environment variables over defaults.

Every process of a grid (CLI, scheduler, node daemons) builds its settings the
same way, so the embedded stack only has to export the variables returned by
:meth:`Settings.to_env` to its children for them all to agree.

=================================  =========================================  ==========================
variable                           meaning                                    default
=================================  =========================================  ==========================
``GRID_TASKS_BROKER_URL``          Celery broker (Redis or RabbitMQ)          ``redis://127.0.0.1:6379/1``
``GRID_TASKS_RESULT_BACKEND``      Celery result backend                      the broker URL if Redis,
                                                                              else ``GRID_TASKS_REDIS_URL``
``GRID_TASKS_REDIS_URL``           tokens, locks, barriers, heartbeats        the broker URL if Redis,
                                                                              else ``redis://127.0.0.1:6379/1``
``GRID_TASKS_DATABASE_URL``        durable state (SQLAlchemy URL)             SQLite file in the state dir
``GRID_TASKS_STATE_DIR``           private files (database, embedded Redis)   ``$XDG_STATE_HOME/grid_tasks``
                                                                              if set, else ``./.state``
``GRID_TASKS_TOPOLOGY``            grid topology TOML file                    ``config/grid.toml``
``GRID_TASKS_HEARTBEAT_INTERVAL``  seconds between node heartbeats            ``5``
``GRID_TASKS_HEARTBEAT_TTL``       seconds until a silent node is Unknown     1.8 x the interval
``GRID_TASKS_VISIBILITY_TIMEOUT``  seconds until an unacked task is redone    ``30``
``GRID_TASKS_LEAN_NODES``          node daemons with the cheap idle settings  ``1`` (``0``: Celery's
                                   of :mod:`grid_tasks.node.worker_config`    defaults)
=================================  =========================================  ==========================

Bounds on the work a small request may cause:

===================================  =======================================  =====================
variable                             meaning                                  default
===================================  =======================================  =====================
``GRID_TASKS_RSL_MAX_SUBSTITUTION``  bytes the substitutions of one RSL       ``1048576`` (1 MiB)
                                     request may produce, in all (see
                                     :mod:`grid_tasks.rsl.evaluate`)
===================================  =======================================  =====================

Security settings (``GRID_TASKS_SIGNING*``, ``GRID_TASKS_REDIS_TLS_*``,
``GRID_TASKS_GRIDMAP``, ``GRID_TASKS_SINGLE_USER``) are described in
:mod:`grid_tasks.security.config`.

Redis database 0 is deliberately not the default: it is where unrelated
software on a shared host usually keeps its data.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from grid_tasks.errors import ConfigError
from grid_tasks.limits import DEFAULT_MAX_SUBSTITUTION
from grid_tasks.security.config import RedisTLS, SigningSettings, flag, gridmap_from_env

PREFIX = "GRID_TASKS_"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/1"
DATABASE_FILE = "grid_tasks.db"

# The repository's config/ directory (for an editable install or a checkout);
# used when the working directory has no config/ of its own.
PACKAGE_CONFIG_DIR = Path(__file__).resolve().parent.parent / "config"

_BROKER_SCHEMES = {"redis", "rediss", "amqp", "amqps", "pyamqp", "memory", "sentinel"}
_BACKEND_SCHEMES = {"redis", "rediss", "rpc", "sentinel", "cache+memory", "disabled"}
_REDIS_SCHEMES = {"redis", "rediss", "unix"}


def default_config_file(name: str) -> Path:
    """``config/<name>`` in the working directory if present, else the checkout's."""
    local = Path("config") / name
    if local.exists():
        return local
    return PACKAGE_CONFIG_DIR / name


# A silent node must read Unknown within two heartbeat intervals of its last beat.
# The key's TTL starts when the beat is written, a little after the interval's tick,
# so a TTL of exactly two intervals overshoots by the write time; 1.8 keeps a margin
# there and still lets one beat arrive 0.8 intervals late.
TTL_INTERVALS = 1.8


def default_ttl(interval: float) -> float:
    """The heartbeat TTL for ``interval`` when none is configured."""
    return TTL_INTERVALS * interval


@dataclass(frozen=True)
class Settings:
    """Where the services of a grid are, and the node liveness timing."""

    broker_url: str = DEFAULT_REDIS_URL
    result_backend: str = DEFAULT_REDIS_URL
    redis_url: str = DEFAULT_REDIS_URL
    database_url: str = f"sqlite:///.state/{DATABASE_FILE}"
    state_dir: Path = Path(".state")
    topology_file: Path = Path("config/grid.toml")
    heartbeat_interval: float = 5.0
    heartbeat_ttl: float = TTL_INTERVALS * 5.0
    visibility_timeout: float = 30.0
    signing: SigningSettings = field(default_factory=SigningSettings)
    redis_tls: RedisTLS = field(default_factory=RedisTLS)
    gridmap_file: Path | None = None
    #: a one-user grid (the embedded stack): no grid map, jobs run as the daemon's own
    #: account, even root's; see :func:`grid_tasks.security.startup.check_node_account`
    single_user: bool = False
    rsl_max_substitution: int = DEFAULT_MAX_SUBSTITUTION
    #: node daemons run with :mod:`grid_tasks.node.worker_config`'s settings
    lean_nodes: bool = True

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "Settings":
        """Read ``GRID_TASKS_*`` variables over the defaults.

        Raises :class:`ConfigError` naming the variable when a value is malformed.
        """
        env = os.environ if environ is None else environ
        state_dir = _state_dir(env)
        broker = _url(env, "BROKER_URL", DEFAULT_REDIS_URL, _BROKER_SCHEMES)
        broker_is_redis = _scheme(broker) in {"redis", "rediss"}
        redis_url = _url(env, "REDIS_URL", broker if broker_is_redis else DEFAULT_REDIS_URL,
                         _REDIS_SCHEMES)
        backend = _url(env, "RESULT_BACKEND", broker if broker_is_redis else redis_url,
                       _BACKEND_SCHEMES, allow_db_prefix=True)
        database = _url(env, "DATABASE_URL", f"sqlite:///{state_dir / DATABASE_FILE}", None)
        topology = Path(env.get(PREFIX + "TOPOLOGY") or default_config_file("grid.toml"))
        interval = _seconds(env, "HEARTBEAT_INTERVAL", 5.0)
        ttl = _seconds(env, "HEARTBEAT_TTL", default_ttl(interval))
        if ttl <= interval:
            raise _bad("HEARTBEAT_TTL", str(ttl),
                       f"must exceed GRID_TASKS_HEARTBEAT_INTERVAL ({interval:g} s), "
                       "or live nodes would flicker to Unknown")
        visibility = _seconds(env, "VISIBILITY_TIMEOUT", 30.0)
        return cls(broker, backend, redis_url, database, state_dir, topology,
                   interval, ttl, visibility,
                   signing=SigningSettings.from_env(env, state_dir),
                   redis_tls=RedisTLS.from_env(env), gridmap_file=gridmap_from_env(env),
                   single_user=flag(env, "SINGLE_USER"),
                   rsl_max_substitution=rsl_max_substitution(env),
                   lean_nodes=flag(env, "LEAN_NODES", default="1"))

    def replace(self, **changes: object) -> "Settings":
        """A copy with some fields changed (settings are immutable)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def to_env(self) -> dict[str, str]:
        """The ``GRID_TASKS_*`` variables that make :meth:`from_env` rebuild these settings."""
        return {
            PREFIX + "BROKER_URL": self.broker_url,
            PREFIX + "RESULT_BACKEND": self.result_backend,
            PREFIX + "REDIS_URL": self.redis_url,
            PREFIX + "DATABASE_URL": self.database_url,
            PREFIX + "STATE_DIR": str(self.state_dir),
            PREFIX + "TOPOLOGY": str(self.topology_file),
            PREFIX + "HEARTBEAT_INTERVAL": repr(self.heartbeat_interval),
            PREFIX + "HEARTBEAT_TTL": repr(self.heartbeat_ttl),
            PREFIX + "VISIBILITY_TIMEOUT": repr(self.visibility_timeout),
            **self.signing.to_env(),
            **self.redis_tls.to_env(),
            **({PREFIX + "GRIDMAP": str(self.gridmap_file)} if self.gridmap_file else {}),
            **({PREFIX + "SINGLE_USER": "1"} if self.single_user else {}),
            PREFIX + "RSL_MAX_SUBSTITUTION": str(self.rsl_max_substitution),
            PREFIX + "LEAN_NODES": "1" if self.lean_nodes else "0",
        }


def app_settings(app: Any) -> Settings:
    """The settings a Celery app was made with (``create_app`` keeps them on it), else
    the environment's (a bare ``celery -A`` app)."""
    return getattr(app, "grid_settings", None) or Settings.from_env()


def node_env(settings: Settings) -> dict[str, str]:
    """The ``GRID_TASKS_*`` variables of a node daemon: ``settings`` without the database
    URL.  Nodes hold no database credentials: they report to their RM's gatekeeper,
    which records what they say (:mod:`grid_tasks.gram.report_tasks`)."""
    env = settings.to_env()
    del env[PREFIX + "DATABASE_URL"]
    return env


def _bad(name: str, value: str, why: str) -> ConfigError:
    return ConfigError(f"{PREFIX}{name}={value!r}: {why}", source="environment",
                       key=PREFIX + name)


def _state_dir(env: Mapping[str, str]) -> Path:
    raw = env.get(PREFIX + "STATE_DIR")
    if raw is not None:
        if not raw.strip():
            raise _bad("STATE_DIR", raw, "must not be empty")
        return Path(raw).expanduser()
    xdg = env.get("XDG_STATE_HOME")
    return Path(xdg) / "grid_tasks" if xdg else Path(".state")


def _scheme(url: str) -> str:
    return url.split("://", 1)[0].lower() if "://" in url else ""


def _url(env: Mapping[str, str], name: str, default: str,
         schemes: set[str] | None, allow_db_prefix: bool = False) -> str:
    raw = env.get(PREFIX + name)
    if raw is None or raw == "":
        return default
    value = raw.strip()
    scheme = _scheme(value)
    if not scheme:
        raise _bad(name, raw, "not a URL (expected scheme://...)")
    ok = schemes is None or scheme in schemes or (allow_db_prefix and scheme.startswith("db+"))
    if not ok:
        raise _bad(name, raw, f"unsupported scheme {scheme!r} (expected one of "
                              f"{', '.join(sorted(schemes or ()))})")
    try:
        parts = urlsplit(value)
        _ = parts.port  # raises ValueError on a non-numeric or out-of-range port
    except ValueError as exc:
        raise _bad(name, raw, f"malformed URL ({exc})") from None
    return value


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(PREFIX + name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise _bad(name, raw, "expected a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise _bad(name, raw, "expected a positive, finite number of seconds")
    return value


def rsl_max_substitution(environ: Mapping[str, str] | None = None) -> int:
    """``GRID_TASKS_RSL_MAX_SUBSTITUTION``: the bytes one RSL request's substitutions may produce.

    Read on its own too, by commands that only check RSL and need no other setting.
    """
    env = os.environ if environ is None else environ
    name = "RSL_MAX_SUBSTITUTION"
    raw = env.get(PREFIX + name)
    if raw is None or raw.strip() == "":
        return DEFAULT_MAX_SUBSTITUTION
    text = raw.strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 18) or int(text) == 0:
        raise _bad(name, raw, "expected a positive whole number of bytes, at most 18 digits "
                              "(default 1048576, 1 MiB)")
    return int(text)
