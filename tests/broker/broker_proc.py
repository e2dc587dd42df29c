"""A broker process for the concurrency and fault tests (run as a script, not collected).

    python broker_proc.py CONFIG_JSON

CONFIG keys: url, prefix, ttl, attempts, seed, owner, t0, mode ("plain" | "slow" |
"durable"), marker (a file to create when holding tokens in "slow" mode), durable (a
SQLite file for "durable" mode), stop (a file whose existence ends a "durable" run),
hold (confirmed jobs a "plain" broker keeps before releasing the oldest, default 3),
probe_every (if set, a "plain" broker runs a probe on its private nodes, see
:func:`probe_capacities`, at attempt 1 and every that many attempts after).
Prints one JSON line of counts at the end.

Why ``hold``: a broker that never released half of its confirmed jobs filled the shared
200-second horizon within the first few hundred attempts, after which every attempt was
refused, so a long run kept tokens (or confirmed anything) only in its first seconds,
by chance.  Releasing the oldest confirmed job ("it ran and finished") keeps the shared
timelines in a steady state for the whole run.  The probes make the outcomes the test
asserts certain, whatever the interleaving: on resources no other broker claims, a
refusal, an abandoned token and a veto followed by a candidate that keeps a token.
"""

from __future__ import annotations

import json
import random
from collections import deque
import sqlite3
import sys
import time
from pathlib import Path

from grid_tasks.broker.enactor import Enactor, EnactmentRefused, placement_claims
from grid_tasks.broker.planner import Placement, Schedule
from grid_tasks.errors import ConnectivityError
from grid_tasks.legion.tokens import Claim, TokenRefused, TokenStore

RESOURCES = {"rmA": {"node1": 4, "node2": 4}, "rmB": {"node3": 2, "node4": 2},
             "rmC": {"node5": 3, "node6": 3}}
CAPACITIES = {f"{rm}/{node}": cap for rm, nodes in RESOURCES.items()
              for node, cap in nodes.items()}
HORIZON = 200.0
PROBE_CAPACITY = 64  # per private probe node: abandoned probe tokens never fill it


def _placement(rng: random.Random, subjob: int, start: float, duration: float) -> Placement:
    rm = rng.choice(sorted(RESOURCES))
    nodes = rng.sample(sorted(RESOURCES[rm]), rng.randint(1, 2))
    return Placement(subjob, rm, start, duration,
                     tuple((n, rng.randint(1, 2)) for n in sorted(nodes)))


def candidates(rng: random.Random, t0: float) -> list[Schedule]:
    """1-3 candidates; each later one changes a single placement of the previous one."""
    start = t0 + rng.randrange(0, int(HORIZON), 5)
    duration = float(rng.randint(1, 30))
    placements = [_placement(rng, i, start, duration) for i in range(rng.randint(1, 3))]
    out = [Schedule(start, tuple(placements))]
    for _ in range(rng.randint(0, 2)):
        i = rng.randrange(len(placements))
        placements[i] = _placement(rng, i, start, duration)
        out.append(Schedule(start, tuple(placements)))
    return out


def durable_db(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=30, isolation_level=None)
    db.execute("CREATE TABLE IF NOT EXISTS reservation (job TEXT PRIMARY KEY, claims TEXT)")
    return db


def durable_claims(schedule: Schedule) -> list[list]:
    return [[c.resource, c.start, c.end, c.procs]
            for p in schedule.placements for c in placement_claims(p)]


def run(cfg: dict) -> dict:
    rng = random.Random(cfg["seed"])
    store = TokenStore.from_url(cfg["url"], prefix=cfg["prefix"], ttl=cfg["ttl"])
    enactor = Enactor(store, owner=cfg["owner"])
    db = durable_db(cfg["durable"]) if cfg.get("durable") else None
    counts = {"confirmed": 0, "refused": 0, "released": 0, "abandoned": 0, "errors": 0,
              "kept": 0, "probes": 0, "probe_refused": 0, "probe_abandoned": 0,
              "probe_kept": 0}
    cfg["held"] = deque()
    n = 0
    while n < cfg["attempts"] or (cfg.get("stop") and not Path(cfg["stop"]).exists()):
        n += 1
        job = f"{cfg['owner']}-{n}"
        schedules = candidates(rng, cfg["t0"])
        try:
            if cfg.get("probe_every") and n % cfg["probe_every"] == 1:
                probe(cfg, store, enactor, job, counts)
            step(cfg, rng, store, enactor, db, job, schedules, counts)
        except ConnectivityError:
            counts["errors"] += 1
            time.sleep(0.02)
        if cfg.get("stop") and n >= cfg["attempts"] and Path(cfg["stop"]).exists():
            break
    return counts


def step(cfg, rng, store, enactor, db, job, schedules, counts) -> None:
    if cfg["mode"] == "plain" and rng.random() < 0.03:
        # a broker that dies holding tokens: nobody releases them, the TTL does
        claims = [c for p in schedules[0].placements for c in placement_claims(p)]
        try:
            store.take(claims, cfg["owner"])
            counts["abandoned"] += 1
        except Exception:  # refused: nothing held
            pass
        return

    def confirm(schedule: Schedule) -> bool:
        if cfg["mode"] == "slow":
            Path(cfg["marker"]).write_text(job)
            time.sleep(60)  # killed here, holding unconfirmed tokens
        if db is not None:
            db.execute("INSERT INTO reservation VALUES (?, ?)",
                       (job, json.dumps(durable_claims(schedule))))
            return True
        return rng.random() >= 0.1  # an RM vetoes now and then

    def undo(schedule: Schedule) -> None:
        if db is not None:  # the row and the mirror a restore may have made of it go
            undo_durable(db, store, job, len(durable_claims(schedule)))  # together

    try:
        result = enactor.enact(schedules, job, confirm, undo_fn=undo)
    except EnactmentRefused:
        counts["refused"] += 1
        return
    counts["confirmed"] += 1
    counts["kept"] += sum(a.kept for a in result.attempts)
    if db is None and rng.random() < 0.5:
        store.release(result.tokens)
        counts["released"] += 1
    elif db is None:  # the job runs for a while: released once newer ones are held
        cfg["held"].append(result.tokens)
        if len(cfg["held"]) > cfg.get("hold", 3):
            store.release(cfg["held"].popleft())
            counts["released"] += 1


def probe_rm(cfg: dict) -> str:
    return f"probe-{cfg['owner']}"


def probe_capacities(owner: str) -> dict[str, int]:
    """The private nodes of a "plain" broker's probes: registered by the test before the
    brokers start (a scan reads capacities, then tokens: never a token of a node it
    has not seen)."""
    return {f"{probe_rm({'owner': owner})}/{node}": PROBE_CAPACITY for node in ("n1", "n2")}


def probe(cfg: dict, store: TokenStore, enactor: Enactor, job: str, counts: dict) -> None:
    """Certain outcomes on this broker's private nodes, amid the shared contention."""
    rm, at = probe_rm(cfg), cfg["t0"] + 10 * HORIZON
    counts["probes"] += 1
    try:  # more processors than the node has: always refused, nothing taken
        store.take([Claim(f"{rm}/n1", at, at + 10, PROBE_CAPACITY + 1)], cfg["owner"])
    except TokenRefused:
        counts["probe_refused"] += 1
    # a broker dying holding a token: it expires with the TTL
    store.take([Claim(f"{rm}/n2", at + 100, at + 110, 1)], cfg["owner"])
    counts["probe_abandoned"] += 1
    # the first candidate is vetoed; the second changes one placement, keeps the other
    first = Schedule(at, (Placement(0, rm, at, 10.0, (("n1", 1),)),
                          Placement(1, rm, at, 10.0, (("n2", 1),))))
    second = Schedule(at, (first.placements[0], Placement(1, rm, at, 10.0, (("n2", 2),))))
    result = enactor.enact([first, second], f"{job}-probe", lambda s: s is second)
    counts["probe_kept"] += sum(a.kept for a in result.attempts)
    store.release(result.tokens)


def undo_durable(db: sqlite3.Connection, store: TokenStore, job: str, size: int) -> None:
    """Delete ``job``'s row and release its mirror, under the write lock that
    :func:`restore_from` holds while it mirrors, as an RM's release forgets the mirror:
    a broker whose confirmation failed after the restore had read its row (tokens of
    the old Redis) must not leave the restored copy behind."""
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute("DELETE FROM reservation WHERE job = ?", (job,))
        try:
            store.release([f"{job}#{i}" for i in range(size)])
        except ConnectivityError:
            pass  # Redis is away: no restore has read the row yet, it is gone for it
    finally:
        db.execute("COMMIT")


def restore_from(store: TokenStore, path: str) -> int:
    """Mirror every durable reservation of the SQLite file back into Redis (holding the
    database's write lock: no row is deleted meanwhile, see :func:`undo_durable`)."""
    db = durable_db(path)
    try:
        db.execute("BEGIN IMMEDIATE")
        rows = db.execute("SELECT job, claims FROM reservation").fetchall()
        durable = []
        for job, raw in rows:
            claims = [Claim(r, s, e, p) for r, s, e, p in json.loads(raw)]
            durable.append((job, [f"{job}#{i}" for i in range(len(claims))], claims))
        store.restore(CAPACITIES, durable)
        db.execute("COMMIT")
    finally:
        db.close()
    return len(durable)


if __name__ == "__main__":
    print(json.dumps(run(json.loads(sys.argv[1]))), flush=True)
