"""RSL parser throughput.

Run: .venv/bin/python benchmarks/bench_rsl.py [--quick]

Prints parses per second of a typical ~300-byte GRAM request (distinct texts,
so the parse cache never hits; plus the cached rate and lark's own LALR loop
as a peer measured in the same run), of a 1,000-relation request, and the
time per relation for growing request sizes to show that parsing is linear.
Target: >= 5,000 typical requests per second.
"""

from __future__ import annotations

import argparse
import time
from typing import Callable

from grid_tasks.rsl import lower, parse
from grid_tasks.rsl.parser import parse_with_lark


def parse_uncached(text: str) -> object:
    return parse(text, cache=False)

TYPICAL = (
    "&(executable = /usr/local/bin/mpi_app)(arguments = -n {n} \"input file.dat\" --verbose)"
    "(count = 16)(host_count = 4)(jobType = mpi)(directory = $(HOME)/run)"
    "(stdout = $(HOME)/out.txt)(stderr = $(HOME)/err.txt)(maxWallTime = 120)"
    "(queue = batch)(project = grid)(environment = (OMP_NUM_THREADS 4) (LANG C))"
)


def big_request(relations: int, salt: int = 0) -> str:
    body = "".join(f"(attr{i} = value{i} \"quoted {i}\" $(V{i % 7}))" for i in range(relations))
    return f"&(salt = {salt}){body}"


def rate(func: Callable[[str], object], texts: list[str], rounds: int = 5) -> float:
    """Calls per second: best of ``rounds`` passes over ``texts``.

    Best-of because the machine is shared: the fastest pass is the one least
    disturbed by other processes.
    """
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for text in texts:
            func(text)
        best = min(best, time.perf_counter() - start)
    return len(texts) / best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = ap.parse_args()
    n = 1_000 if args.quick else 2_000

    typical = [TYPICAL.format(n=i) for i in range(n)]
    parse(typical[0])  # build the LALR tables once
    print(f"typical GRAM request: {len(typical[0])} bytes")
    fast = rate(parse_uncached, typical)
    print(f"  parse (cache off):                {fast:10,.0f} parses/s   target >= 5,000")
    lark_rate = rate(parse_with_lark, typical)
    print(f"  lark's own LALR loop (peer):      {lark_rate:10,.0f} parses/s   ratio fast/lark = {fast / lark_rate:.2f}x")
    cached = rate(parse, [typical[0]] * n)
    print(f"  parse (same text, cache hit):     {cached:10,.0f} parses/s")
    home = {"HOME": "/home/user"}
    lowered = rate(lambda t: lower(t, home), typical)
    print(f"  lower (parse+evaluate+validate):  {lowered:10,.0f} requests/s")

    reps = 10 if args.quick else 20
    big = [big_request(1_000, salt) for salt in range(reps)]
    print(f"1,000-relation request: {len(big[0]):,} bytes")
    print(f"  parse: {rate(parse_uncached, big):8,.1f} parses/s")

    print("linearity (distinct texts, best of 3 passes):")
    print(f"  {'relations':>10} {'bytes':>10} {'ms/parse':>10} {'us/relation':>12}")
    for size in (10, 100, 1_000, 10_000):
        count = max(2, (4_000 if args.quick else 20_000) // size)
        texts = [big_request(size, salt=k) for k in range(count)]
        per_parse = 1 / rate(parse_uncached, texts, rounds=3)
        print(f"  {size:>10,} {len(texts[0]):>10,} {per_parse * 1e3:>10.3f} {per_parse / size * 1e6:>12.2f}")

if __name__ == "__main__":
    main()
