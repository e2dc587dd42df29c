"""Settings of the highly available beat: lease length, standby poll, identity.

=================================  ==========================================  =========
variable                           meaning                                     default
=================================  ==========================================  =========
``GRID_TASKS_BEAT_LEASE``          seconds a silent leader keeps leadership    ``10``
``GRID_TASKS_BEAT_POLL``           seconds between a standby's claim attempts  lease / 10,
                                                                               at most 1
=================================  ==========================================  =========

A killed leader is replaced within ``lease + poll`` seconds (plus one tick of
the new leader); the leader renews every ``lease / 3`` seconds, so two missed
renewals in a row still leave it leader.
"""

from __future__ import annotations

import math
import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from grid_tasks.errors import ConfigError
from grid_tasks.security.config import is_tls_url
from grid_tasks.settings import PREFIX, Settings

#: Every key of the HA beat (redbeat's schedule and ours) lives under this prefix.
KEY_PREFIX = "grid_tasks:beat:"
LEASE_KEY = KEY_PREFIX + "leader"
MEMBERS_KEY = KEY_PREFIX + "members"
EMITTED_KEY = KEY_PREFIX + "emitted"
#: redbeat's own keys (entries, the schedule zset) sit one level down, apart from ours.
REDBEAT_PREFIX = KEY_PREFIX + "sched:"
SCHEDULE_KEY = REDBEAT_PREFIX + ":schedule"  # redbeat appends ':schedule' to its prefix
SCHEDULER_CLASS = "grid_tasks.ha.scheduler:HABeatScheduler"

DEFAULT_LEASE = 10.0


@dataclass(frozen=True)
class BeatOptions:
    """How long a leader's lease lasts, how often a standby tries, who this beat is."""

    lease: float = DEFAULT_LEASE
    poll: float | None = None
    identity: str | None = None

    def __post_init__(self) -> None:
        _check("BEAT_LEASE", self.lease)
        if self.poll is not None:
            _check("BEAT_POLL", self.poll)
            if self.poll >= self.lease:
                raise ConfigError(f"{PREFIX}BEAT_POLL={self.poll:g} must be shorter than the "
                                  f"lease ({self.lease:g} s)", source="beat options",
                                  key=PREFIX + "BEAT_POLL")

    @property
    def poll_interval(self) -> float:
        """Seconds between a standby's claim attempts."""
        return self.poll if self.poll is not None else min(1.0, max(0.05, self.lease / 10))

    @property
    def renew_interval(self) -> float:
        """Seconds between a leader's renewals (its longest sleep)."""
        return self.lease / 3

    @property
    def failover_bound(self) -> float:
        """Worst case from a leader's death to the standby holding the lease."""
        return self.lease + self.poll_interval

    def with_identity(self) -> "BeatOptions":
        """A copy with a unique identity (host, pid and a random suffix) if none is set."""
        if self.identity:
            return self
        ident = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        return BeatOptions(self.lease, self.poll, ident)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> "BeatOptions":
        """``GRID_TASKS_BEAT_*`` variables, then ``overrides`` that are not None."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {"lease": _seconds(env, "BEAT_LEASE", DEFAULT_LEASE),
                                  "poll": _seconds(env, "BEAT_POLL", None)}
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


def _check(name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{PREFIX}{name}={value!r}: expected a positive number of seconds",
                          source="beat options", key=PREFIX + name)


def _seconds(env: Mapping[str, str], name: str, default: float | None) -> float | None:
    raw = env.get(PREFIX + name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{PREFIX}{name}={raw!r}: expected a number of seconds",
                          source="environment", key=PREFIX + name) from None
    _check(name, value)
    return value


def beat_config(settings: Settings, options: BeatOptions) -> dict[str, Any]:
    """Celery configuration that makes ``celery beat`` the HA scheduler for ``settings``."""
    tls = settings.redis_tls.redis_kwargs() if is_tls_url(settings.redis_url) else None
    return {
        "beat_scheduler": SCHEDULER_CLASS,
        "redbeat_redis_use_ssl": tls,
        "beat_max_loop_interval": options.renew_interval,
        "redbeat_redis_url": settings.redis_url,
        "redbeat_redis_options": {},  # explicit: never inherit the broker's transport options
        "redbeat_key_prefix": REDBEAT_PREFIX,
        "redbeat_lock_timeout": options.lease,
        "grid_beat_options": options,
    }
