"""Marks that job ranks leave, so a fault case counts executions instead of trusting states.

Every rank of a fault job runs :data:`SCRIPT`: it appends to a file named
``<job id>.<rank>.<pid>`` in the case's directory a ``start`` line, an ``alive`` line a
second while it runs and an ``end`` line when it completes.  From the files
:func:`exactly_once` tells, per job part (job id, rank): how many copies started, how
many ran to their end, and whether two copies ever ran at the same time - a duplicate
execution the job's state in SQL would never show.  A copy killed by the grid (fenced)
leaves no ``end`` line; its lifetime is taken as start .. last ``alive``, an
under-estimate, so an overlap reported is an overlap that happened.

With ``freeze`` the first rank that starts on a node whose ``freeze.<node>`` file exists
sends SIGSTOP to the PID written in it (the node daemon): the daemon is frozen right
after it spawned the rank and before it could confirm the launch, deterministically.
"""

from __future__ import annotations

import shlex
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from grid_tasks.faults.invariants import Check

#: The rank program: DIR SECS [barrier].  ``GT_FAULT_RUNTIME`` (the grid-tasks command)
#: is substituted when written; ``barrier``: enter the DUROC start barrier first.
SCRIPT = r"""#!/bin/sh
dir="$1"; secs="$2"
if [ "${3:-}" = barrier ]; then GT_FAULT_RUNTIME runtime barrier || exit 3; fi
f="$dir/$GRID_TASKS_JOB_ID.$GRID_TASKS_RANK.$$"
now() { date +%s.%N; }
echo "start $(now) $GRID_TASKS_NODE" >> "$f"
fz="$dir/freeze.$GRID_TASKS_NODE"
if [ -f "$fz" ] && mv "$fz" "$fz.done" 2>/dev/null; then kill -STOP "$(cat "$fz.done")"; fi
i=0
while [ "$i" -lt "$secs" ]; do sleep 1; i=$((i+1)); echo "alive $(now)" >> "$f"; done
echo "end $(now)" >> "$f"
"""


def write_script(directory: Path, runtime_argv: Sequence[str] = ("grid-tasks",)) -> Path:
    """The rank program in ``directory`` (made, world-writable: jobs may run as another
    account), executable; its path."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o1777)
    script = directory / "mark.sh"
    script.write_text(SCRIPT.replace("GT_FAULT_RUNTIME", shlex.join(runtime_argv)))
    script.chmod(0o755)
    return script


def marked_rsl(directory: Path, secs: int, count: int, extra: str = "",
               barrier: bool = False) -> str:
    """A GRAM request whose ``count`` ranks each run ``secs`` s and leave their marks."""
    args = f'"{directory}" "{secs}"' + (' "barrier"' if barrier else "")
    return (f'&(executable="{directory / "mark.sh"}")(arguments={args})(count={count})'
            f"(maxWallTime={max(1, (secs + 120) // 60)}){extra}")


@dataclass(frozen=True)
class Execution:
    """One copy of a rank that started: when, where, and whether it ran to its end."""

    job: int
    rank: int
    pid: int
    node: str
    start: float
    last: float
    ended: bool


def read_marks(directory: Path) -> list[Execution]:
    """Every execution marked in ``directory`` (files of other shapes are skipped)."""
    found = []
    for path in sorted(Path(directory).glob("*.*.*")):
        parts = path.name.split(".")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            continue
        lines = [ln.split() for ln in path.read_text().splitlines() if ln.strip()]
        starts = [ln for ln in lines if ln[0] == "start"]
        if not starts:
            continue
        times = [float(ln[1]) for ln in lines if len(ln) > 1]
        node = starts[0][2] if len(starts[0]) > 2 else "?"
        found.append(Execution(int(parts[0]), int(parts[1]), int(parts[2]), node,
                               float(starts[0][1]), max(times),
                               any(ln[0] == "end" for ln in lines)))
    return found


def _overlaps(runs: list[Execution]) -> list[tuple[Execution, Execution]]:
    """Pairs of executions of one part whose marked lifetimes intersect."""
    ordered = sorted(runs, key=lambda e: e.start)
    return [(a, b) for i, a in enumerate(ordered) for b in ordered[i + 1:]
            if b.start < a.last]


def part_problems(job: int, state: str, count: int, runs: Sequence[Execution]) -> list[str]:
    """What is wrong with job ``job``'s executions (``state`` its final GRAM state)."""
    by_rank: dict[int, list[Execution]] = defaultdict(list)
    for run in runs:
        by_rank[run.rank].append(run)
    bad = [f"job {job} rank {r}: a rank beyond count={count}" for r in by_rank if r >= count]
    for rank in range(count):
        mine = by_rank.get(rank, [])
        ended = sum(1 for e in mine if e.ended)
        if ended > 1:
            bad.append(f"job {job} rank {rank}: ran to its end {ended} times")
        for a, b in _overlaps(mine):
            bad.append(f"job {job} rank {rank}: two copies at once (pid {a.pid} on {a.node}, "
                       f"pid {b.pid} on {b.node}, {a.last - b.start:.1f} s together)")
        if state == "DONE" and ended == 0:
            bad.append(f"job {job} rank {rank}: DONE, but no copy ran to its end "
                       f"({len(mine)} started)")
    return bad


def exactly_once(directory: Path, expect: Mapping[int, tuple[str, int]]) -> Check:
    """Each part (job, rank) of ``expect`` ({job id: (final state, count)}) ran at most
    once at a time and to its end at most once; a DONE job's every rank exactly once.
    Marks of a job the case did not submit are a problem too."""
    runs = read_marks(directory)
    per_job: dict[int, list[Execution]] = defaultdict(list)
    for run in runs:
        per_job[run.job].append(run)
    bad = [f"job {j}: marks of a job the case did not submit" for j in per_job
           if j not in expect]
    for job, (state, count) in sorted(expect.items()):
        bad += part_problems(job, state, count, per_job.get(job, []))
    parts = sum(count for _, count in expect.values())
    ended = sum(1 for r in runs if r.ended)
    return Check("exactly once", not bad, "; ".join(bad[:4]) + (f" (+{len(bad) - 4})"
                                                                 if len(bad) > 4 else "")
                 if bad else f"{len(runs)} executions of {parts} parts, {ended} to their end")


def no_run_after_end(directory: Path, ends: Mapping[int, float], grace: float,
                     skip_nodes: Collection[str] = ()) -> Check:
    """No rank was still alive ``grace`` s after SQL recorded its job's end (``ends``:
    job id -> POSIX end time): a job declared over must be fenced, not left running.
    Ranks on ``skip_nodes`` (whose daemon the case froze: nothing there can act until
    it is resumed) are left out."""
    late = [f"job {e.job} rank {e.rank} on {e.node} alive {e.last - ends[e.job]:.1f} s "
            f"after its job ended" for e in read_marks(directory)
            if e.job in ends and e.last > ends[e.job] + grace and e.node not in skip_nodes]
    return Check("nothing runs after its job ended", not late,
                 "; ".join(late[:3]) if late else
                 f"every marked rank gone within {grace:g} s of its job's end")
