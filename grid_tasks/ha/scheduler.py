"""``HABeatScheduler``: celery-redbeat's Redis schedule behind our own leadership lease.

Run two or more ``grid-tasks beat`` processes: all of them keep the schedule in
Redis (celery-redbeat stores every entry with its ``last_run_at``, so a new
leader continues the schedule where the old one stopped instead of starting it
over), but only the holder of the lease (:mod:`grid_tasks.ha.lease`) sends
anything.  Why our own lease rather than redbeat's lock: redbeat's standby
retries its lock only every ``beat_max_loop_interval`` and a leader that loses
the lock crashes; ours polls at ``poll`` seconds, demotes a leader that lost
its lease back to standby, and checks the lease right before each send
(a paused leader that wakes up after its lease expired sends nothing).

Each beat also records itself in ``grid_tasks:beat:members`` (role, last seen)
and counts what it sent in ``grid_tasks:beat:emitted`` for ``grid-tasks beat
status`` and the metrics endpoint.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import redis
from redbeat.schedulers import RedBeatScheduler, get_redis

from grid_tasks.ha.config import EMITTED_KEY, LEASE_KEY, MEMBERS_KEY, BeatOptions
from grid_tasks.ha.lease import Lease
from grid_tasks.security.connections import redis_client
from grid_tasks.settings import app_settings

log = logging.getLogger("grid_tasks.ha.beat")
#: A member not seen for this many leases is forgotten.
FORGET_AFTER_LEASES = 10


class HABeatScheduler(RedBeatScheduler):
    """A redbeat scheduler that only sends while it holds the beat lease."""

    def __init__(self, app: Any, **kwargs: Any) -> None:
        self._own: dict[str, Any] = {}  # entries this process installed (setup + beat_init)
        options = app.conf.get("grid_beat_options") or BeatOptions.from_env()
        self.options: BeatOptions = options.with_identity()
        super().__init__(app, **kwargs)
        self.lock_key = None  # redbeat's own lock stays off: leadership is the lease's
        self.lease = Lease(get_redis(app), LEASE_KEY, self.identity, self.options.lease)
        self.role = "starting"
        self._since = time.time()

    @property
    def identity(self) -> str:
        """This beat's name in the lease, the member list and the emission counts."""
        assert self.options.identity
        return self.options.identity

    # --- the schedule --------------------------------------------------------------

    def update_from_dict(self, dict_: dict[str, Any]) -> None:
        """Store entries in Redis and remember them as this beat's own."""
        self._own.update(dict_)
        super().update_from_dict(dict_)

    def _take_over_schedule(self) -> None:
        """On becoming leader: our entries are the schedule; drop entries nobody installed."""
        super().update_from_dict(dict(self._own))
        client = get_redis(self.app)
        conf = self.app.redbeat_conf
        keep = {self.Entry.generate_key(self.app, name) for name in self._own}
        for key in client.zrange(conf.schedule_key, 0, -1):
            if key not in keep:
                log.info("beat %s: removing schedule entry %s (not ours)", self.identity, key)
                client.zrem(conf.schedule_key, key)
                client.delete(key)

    def _schedule_lost(self) -> bool:
        return get_redis(self.app).zcard(self.app.redbeat_conf.schedule_key) < len(self._own)

    # --- leadership ----------------------------------------------------------------

    def tick(self, min: Any = min, **kwargs: Any) -> float:
        """Send what is due if we lead; otherwise try to lead and come back after ``poll``."""
        try:
            if not self._lead():
                return self.options.poll_interval
            return min(super().tick(min=min, **kwargs), self.options.renew_interval)
        except redis.RedisError as exc:
            # Without Redis we cannot know who leads: send nothing until it is back.
            if self.lease.held:
                log.warning("beat %s: Redis unreachable (%s); standing by", self.identity, exc)
            self.lease.held = False
            self.role = "disconnected"
            return self.options.poll_interval

    def _lead(self) -> bool:
        was = self.lease.held
        now_leader = self.lease.claim()
        if now_leader and not was:
            self.role, self._since = "leader", time.time()
            log.info("beat %s: leader (lease %.3g s)", self.identity, self.options.lease)
            self._take_over_schedule()
        elif now_leader and self._schedule_lost():
            # Redis restarted empty (it holds nothing that cannot be rebuilt): rebuild.
            log.warning("beat %s: schedule missing from Redis; reinstalling", self.identity)
            self._take_over_schedule()
        elif was and not now_leader:
            self.role, self._since = "standby", time.time()
            log.warning("beat %s: lost the lease to %s; standing by", self.identity,
                        getattr(self.lease.holder(), "identity", "nobody"))
        elif not now_leader and self.role != "standby":
            self.role, self._since = "standby", time.time()
            log.info("beat %s: standby (leader: %s)", self.identity,
                     getattr(self.lease.holder(), "identity", "?"))
        self._record_presence()
        return now_leader

    def apply_async(self, entry: Any, producer: Any = None, advance: bool = True,
                    **kwargs: Any) -> Any:
        """Send ``entry`` only while the lease is surely ours; tag it with our identity."""
        if not self.lease.fresh() and not self.lease.claim():
            log.warning("beat %s: lease lost before sending %s; not sent", self.identity,
                        entry.name)
            return None
        headers = {**(entry.options.get("headers") or {}), "grid_beat": self.identity}
        entry.options = {**entry.options, "headers": headers}
        result = super().apply_async(entry, producer=producer, advance=advance, **kwargs)
        get_redis(self.app).hincrby(EMITTED_KEY, self.identity, 1)
        return result

    def _record_presence(self) -> None:
        client = get_redis(self.app)
        now = time.time()
        member = {"role": self.role, "since": self._since, "seen": now,
                  "lease": self.options.lease}
        client.hset(MEMBERS_KEY, self.identity, json.dumps(member))
        horizon = now - FORGET_AFTER_LEASES * self.options.lease
        for name, raw in client.hgetall(MEMBERS_KEY).items():
            try:
                seen = float(json.loads(raw).get("seen", 0))
            except (ValueError, TypeError, AttributeError):
                seen = 0.0
            if seen < horizon:
                client.hdel(MEMBERS_KEY, name)

    def close(self) -> None:
        """Give the lease up on a clean stop, so the standby leads within one poll."""
        # celery beat calls this from its SIGTERM handler, which may interrupt a Redis
        # call holding the shared pool's lock: a fresh client cannot deadlock on it.
        settings = app_settings(self.app)
        client = redis_client(settings, self.app.redbeat_conf.redis_url, socket_timeout=2,
                              socket_connect_timeout=2)
        try:
            if self.lease.held:
                self.lease.release(client=client)
                log.info("beat %s: lease released", self.identity)
            client.hdel(MEMBERS_KEY, self.identity)
        except redis.RedisError as exc:
            log.warning("beat %s: could not release the lease: %s", self.identity, exc)
        finally:
            client.close()
        super().close()

    @property
    def info(self) -> str:
        return (f"       . HA beat {self.identity}: lease {self.options.lease:g} s, "
                f"standby poll {self.options.poll_interval:g} s\n{super().info}")
