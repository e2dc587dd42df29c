"""Eight broker processes over shared resources; a broker SIGKILLed; Redis restarted.

Every check reads the real Redis: :func:`scan` sweeps each resource's timeline
(capacity never exceeded at any instant) and checks that every confirmed group is whole.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from grid_tasks.embedded.redis_server import RedisServer
from grid_tasks.legion.tokens import TokenStore, scan
from tests.broker.broker_proc import CAPACITIES, durable_db, probe_capacities, restore_from

SCRIPT = Path(__file__).with_name("broker_proc.py")
TTL = 0.5


_CHILDREN: list[subprocess.Popen] = []


def spawn(cfg: dict) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, str(SCRIPT), json.dumps(cfg)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _CHILDREN.append(proc)
    return proc


@pytest.fixture(autouse=True)
def no_survivors() -> Iterator[None]:
    """Whatever a failing test left running is killed, by the pids it started."""
    yield
    while _CHILDREN:
        proc = _CHILDREN.pop()
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def finish(procs: list[subprocess.Popen], timeout: float = 240) -> list[dict]:
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


@pytest.fixture
def shared(redis_server: RedisServer) -> Iterator[tuple[TokenStore, dict]]:
    prefix = f"conc:{secrets.token_hex(4)}"
    url = redis_server.url(6)
    store = TokenStore.from_url(url, prefix=prefix, ttl=TTL)
    store.set_capacities(CAPACITIES)
    base = {"url": url, "prefix": prefix, "ttl": TTL, "t0": 5_000_000.0}
    yield store, base
    for key in store.client.scan_iter(match=f"{prefix}:*"):
        store.client.delete(key)


def watch(store: TokenStore, procs: list[subprocess.Popen], timeout: float = 120) -> int:
    """Scan the timelines while the brokers run; every snapshot must be consistent."""
    scans = 0
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p in procs):
        assert time.monotonic() < deadline, "the brokers did not finish in time"
        report = scan(store)
        assert report.ok, (report.overbooked[:5], report.broken_groups[:5])
        scans += 1
        time.sleep(0.1)
    return scans


def settle(store: TokenStore) -> None:
    """Wait out the TTL: afterwards only confirmed claims may remain, with no index leak."""
    time.sleep(TTL + 0.1)
    store.purge()
    tokens = store.tokens(include_expired=True)
    assert [t for t in tokens if not t.confirmed] == []
    assert sum(store.timeline_sizes().values()) == len(tokens)
    assert store.index_size() == len(tokens)  # no expiry hint left behind
    report = scan(store)
    assert report.ok and report.confirmed == len(tokens)


def eight_brokers(shared, attempts_each: int, probe_every: int, timeout: float) -> list[dict]:
    """Eight brokers contend for the shared nodes while :func:`watch` scans them.

    What the shared contention yields depends on the interleaving, so the outcomes
    asserted come from each broker's probes on its private nodes (see broker_proc):
    a refusal, an abandoned token and a token kept across candidates, every time.
    """
    store, base = shared
    for i in range(8):
        store.set_capacities(probe_capacities(f"b{i}"))
    procs = [spawn({**base, "attempts": attempts_each, "seed": i, "owner": f"b{i}",
                    "mode": "plain", "probe_every": probe_every}) for i in range(8)]
    scans = watch(store, procs, timeout)  # generous: the machine may be loaded
    results = finish(procs)
    assert scans > 0
    settle(store)
    total = {k: sum(r[k] for r in results) for k in results[0]}
    assert total["confirmed"] + total["refused"] + total["abandoned"] <= 8 * attempts_each
    probes = 8 * len(range(1, attempts_each + 1, probe_every))
    assert (total["probes"], total["probe_refused"], total["probe_abandoned"],
            total["probe_kept"]) == (probes, probes, probes, probes)
    assert total["errors"] == 0
    return results


def test_eight_brokers_ten_thousand_attempts_never_double_book(shared) -> None:
    eight_brokers(shared, 1250, probe_every=500, timeout=300)


@pytest.mark.slow
@pytest.mark.timeout(900)  # ~100 CPU-seconds of brokers and Redis: minutes on a loaded host
def test_eight_brokers_long_run(shared) -> None:
    """100,000 attempts.  The workload stays in a steady state for the whole run (brokers
    release their oldest confirmed jobs), and the counts asserted are the probes'."""
    eight_brokers(shared, 12500, probe_every=2500, timeout=900)


def test_broker_killed_mid_enactment_leaves_nothing_half_made(shared, tmp_path: Path) -> None:
    store, base = shared
    marker = tmp_path / "holding"
    others = [spawn({**base, "attempts": 300, "seed": 100 + i, "owner": f"o{i}",
                     "mode": "plain"}) for i in range(3)]
    victim = spawn({**base, "attempts": 10_000, "seed": 7, "owner": "victim", "mode": "slow",
                    "marker": str(marker)})
    deadline = time.monotonic() + 30
    while not marker.exists():
        assert victim.poll() is None and time.monotonic() < deadline, victim.stderr.read()
        time.sleep(0.01)
    held = [t for t in store.tokens() if t.owner == "victim"]
    assert held and not any(t.confirmed for t in held)  # caught holding unconfirmed tokens
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    finish(others)
    settle(store)  # waits out the TTL
    assert not any(t.owner == "victim" for t in store.tokens(include_expired=True))


def wait_for(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def restored_tokens(store: TokenStore) -> int:
    """How many confirmed tokens the restore put back (the count to grow beyond)."""
    return sum(1 for t in store.tokens() if "#" in t.id)


def test_redis_restart_mid_enactment_leaves_nothing_half_made(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis").start()
    try:
        _restart_scenario(server, tmp_path)
    finally:
        server.stop()


def _restart_scenario(server: RedisServer, tmp_path: Path) -> None:
    url, prefix, path = server.url(0), "restart", str(tmp_path / "durable.db")
    durable_db(path).close()
    store = TokenStore.from_url(url, prefix=prefix, ttl=TTL)
    store.set_capacities(CAPACITIES)
    stop = tmp_path / "stop"
    procs = [spawn({"url": url, "prefix": prefix, "ttl": TTL, "t0": 6_000_000.0,
                    "attempts": 50, "seed": i, "owner": f"d{i}", "mode": "durable",
                    "durable": path, "stop": str(stop)}) for i in range(4)]
    wait_for(lambda: scan(store).confirmed >= 10)
    server.stop()   # no persistence: every token and capacity is gone
    time.sleep(0.3)
    server.start()
    restored = restore_from(store, path)
    assert restored > 0
    wait_for(lambda: scan(store).confirmed > restored_tokens(store))
    stop.touch()
    results = finish(procs)
    assert sum(r["errors"] for r in results) > 0  # the brokers did see Redis go away
    settle(store)
    # every durable reservation is whole in Redis, and Redis confirms nothing else
    db = durable_db(path)
    rows = {job: sorted(map(tuple, json.loads(raw)))
            for job, raw in db.execute("SELECT job, claims FROM reservation")}
    db.close()
    in_redis: dict[str, list] = {}
    for t in store.tokens():
        in_redis.setdefault(t.group, []).append((t.resource, t.start, t.end, t.procs))
    assert {job: sorted(c) for job, c in in_redis.items()} == rows
    assert len(rows) > 0
