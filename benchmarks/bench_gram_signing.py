"""``bench_gram.py --signing``: what message signing costs GRAM (issue 20, "Proof").

Signed and unsigned rounds alternate (unsigned-signed, then signed-unsigned, ...), so
a machine that is busier for a while weighs on both alike.  Each round is one
``bench_gram.py --round MODE`` subprocess with its own fresh embedded stack: kombu's
serializer registry is process-wide, so no client process ever holds both a signing
key and unsigned apps, and no round inherits another's warm workers.

Throughput is compared by the median of the rounds; submit->ACTIVE by the p50 and p95
of all rounds' samples pooled.  Targets (the issue's): signed throughput >= 80% of
unsigned; signed submit->ACTIVE p50 <= 1.25x unsigned.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench_gram import percentile

MODES = ("unsigned", "signed")
#: The issue's targets: signed throughput / unsigned at least this ...
THROUGHPUT_TARGET = 0.80
#: ... and signed submit->ACTIVE p50 / unsigned at most this.
LATENCY_TARGET = 1.25


def run_round(mode: str, index: int, args: argparse.Namespace) -> dict[str, Any]:
    """One round of ``mode`` in a subprocess of its own; its figures (JSON, last line)."""
    argv = [sys.executable, str(Path(__file__).with_name("bench_gram.py")), "--round", mode,
            "--jobs", str(args.jobs), "--latency-jobs", str(args.latency_jobs),
            "--clients", str(args.clients)]
    if args.logs:
        argv += ["--logs", str(args.logs / f"{index}-{mode}")]
    done = subprocess.run(argv, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise SystemExit(f"round {index} ({mode}) failed with exit code {done.returncode}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    check_mode(figures, mode, index)
    return figures


def check_mode(figures: dict[str, Any], mode: str, index: int) -> None:
    """SystemExit unless the round's client sent messages of its mode (``auth`` when
    signed, ``json`` when not): a comparison of two unsigned rounds would pass unseen."""
    expected = "auth" if mode == "signed" else "json"
    if figures["serializer"] != expected:
        raise SystemExit(f"round {index} ({mode}): the client sent {figures['serializer']!r} "
                         f"messages, not {expected!r}")


def summarize(rounds: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per mode: median throughput, pooled latency percentiles; ratios; verdicts."""
    out: dict[str, Any] = {}
    for mode, runs in rounds.items():
        active = [a for r in runs for a in r["active"]]
        out[mode] = {
            "rate": statistics.median(r["rate"] for r in runs),
            "rates": [r["rate"] for r in runs],
            "active_p50": percentile(active, 0.5), "active_p95": percentile(active, 0.95),
            "active_p50s": [percentile(r["active"], 0.5) for r in runs],
            "trip": statistics.median(r["trip"] for r in runs),
            "cpu_per_job": statistics.median(r["cpu_per_job"] for r in runs),
            "cpu_by_group": {g: statistics.median(r["cpu_by_group"].get(g, 0.0) for r in runs)
                             for g in runs[0].get("cpu_by_group", {})},
            "refused": sum(sum(r["refused"].values()) for r in runs),
        }
    signed, unsigned = out["signed"], out["unsigned"]
    out["ratios"] = {key: signed[key] / unsigned[key]
                     for key in ("rate", "active_p50", "active_p95", "trip", "cpu_per_job")}
    out["verdict"] = {
        "throughput": out["ratios"]["rate"] >= THROUGHPUT_TARGET,
        "latency": out["ratios"]["active_p50"] <= LATENCY_TARGET,
    }
    out["noise"] = noise(out)
    out["load"] = [r.get("load", 0.0) for runs in rounds.values() for r in runs]
    return out


def noise(summary: dict[str, Any]) -> dict[str, float]:
    """The widest spread (max / min) between rounds of one mode, of throughput and of
    submit->ACTIVE p50: when it is past a target's margin, other load on the machine
    moved the figures more than signing may, and the verdict says little."""
    def spread(values: list[float]) -> float:
        return max(values) / min(values) if min(values) > 0 else float("inf")

    modes = [summary[m] for m in MODES]
    return {"rate": max(spread(m["rates"]) for m in modes),
            "active_p50": max(spread(m["active_p50s"]) for m in modes)}


def report(summary: dict[str, Any], args: argparse.Namespace) -> None:
    """The figures as tables, the ratios and the verdict against the issue's targets."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal:  # a log file: the whole table, not 80 columns
        console = Console(width=130)
    console.print(figures_table(summary, args))
    for line in verdict_lines(summary):
        console.print(line)
    console.print(cpu_table(summary))
    ratio = summary["ratios"]["cpu_per_job"]
    console.print(f"CPU per job signed/unsigned {ratio:.2f}: when CPU is the limit, signed "
                  f"throughput would be {100 / ratio:.0f}% of unsigned")


def figures_table(summary: dict[str, Any], args: argparse.Namespace) -> Any:
    """One row per mode (medians, pooled percentiles, each round's figure) and the ratios."""
    from rich.table import Table

    table = Table(title=f"GRAM signed vs unsigned: {args.jobs} jobs from {args.clients} "
                        f"clients, {args.latency_jobs} latency jobs, {args.rounds} rounds each")
    for col in ("", "jobs/s (median)", "rounds", "ACTIVE p50 ms", "p95 ms",
                "round p50s ms", "bare trip ms", "CPU ms/job"):
        table.add_column(col, justify="left" if not col else "right")
    for mode in MODES:
        m = summary[mode]
        table.add_row(mode, f"{m['rate']:.1f}", ", ".join(f"{r:.1f}" for r in m["rates"]),
                      f"{m['active_p50'] * 1e3:.1f}", f"{m['active_p95'] * 1e3:.1f}",
                      ", ".join(f"{p * 1e3:.1f}" for p in m["active_p50s"]),
                      f"{m['trip'] * 1e3:.2f}", f"{m['cpu_per_job'] * 1e3:.1f}")
    r = summary["ratios"]
    table.add_row("signed/unsigned", f"{r['rate']:.2f}", "", f"{r['active_p50']:.2f}",
                  f"{r['active_p95']:.2f}", "", f"{r['trip']:.2f}", f"{r['cpu_per_job']:.2f}")
    return table


def verdict_lines(summary: dict[str, Any]) -> list[str]:
    """MET/MISSED per target, refusals, and a NOISY warning when rounds disagree."""
    ratios, verdict = summary["ratios"], summary["verdict"]
    lines = [f"throughput: signed {100 * ratios['rate']:.0f}% of unsigned (target >= "
             f"{100 * THROUGHPUT_TARGET:.0f}%): {'MET' if verdict['throughput'] else 'MISSED'}",
             f"submit->ACTIVE p50: signed {ratios['active_p50']:.2f}x unsigned (target <= "
             f"{LATENCY_TARGET:.2f}x): {'MET' if verdict['latency'] else 'MISSED'}",
             f"messages refused in the signed rounds: {summary['signed']['refused']}"]
    spread, load = summary["noise"], summary["load"]
    if spread["rate"] > 1 / THROUGHPUT_TARGET or spread["active_p50"] > LATENCY_TARGET:
        lines.append(f"NOISY: rounds of one mode differ up to {spread['rate']:.2f}x in "
                     f"throughput and {spread['active_p50']:.2f}x in p50, more than the "
                     f"targets' margins (load average {min(load):.1f}-{max(load):.1f} on "
                     f"{os.cpu_count()} CPUs): rerun on a quieter machine or with more "
                     "rounds; CPU per job below moves less with the load, though not nothing")
    return lines


def cpu_table(summary: dict[str, Any]) -> Any:
    """CPU ms per job of each process group, unsigned and signed: where signing costs."""
    from rich.table import Table

    table = Table(title="CPU per job by process group (median of rounds)")
    for col in ("group", "unsigned ms", "signed ms", "signed - unsigned ms"):
        table.add_column(col, justify="left" if col == "group" else "right")
    unsigned, signed = summary["unsigned"]["cpu_by_group"], summary["signed"]["cpu_by_group"]
    for group in sorted(set(unsigned) | set(signed)):
        u, s = unsigned.get(group, 0.0), signed.get(group, 0.0)
        table.add_row(group, f"{u * 1e3:.2f}", f"{s * 1e3:.2f}", f"{(s - u) * 1e3:+.2f}")
    return table


def compare_signing(args: argparse.Namespace) -> None:
    """Alternate signed and unsigned rounds, each on a fresh stack; print the verdict."""
    rounds: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    for index in range(args.rounds):
        for mode in MODES if index % 2 == 0 else MODES[::-1]:
            figures = run_round(mode, index, args)
            rounds[mode].append(figures)
            print(f"round {index + 1} {mode:>8}: {figures['rate']:.1f} jobs/s, "
                  f"submit->ACTIVE p50 {percentile(figures['active'], 0.5) * 1e3:.1f} ms, "
                  f"load average {figures['load']:.1f}", file=sys.stderr, flush=True)
    summary = summarize(rounds)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        report(summary, args)
