"""CPU spent while something runs on the embedded stack, by process kind (bench_duroc --cpu).

The machine's busy time (every core, from the kernel's counters) is split into the
stack's own processes by kind, the benchmark's process (the client), and the rest:
the jobs' own processes, and whatever else runs on the machine.  Busy time close to
wall time x cores means the window was CPU-bound: then every CPU-millisecond the
grid spends there delays the jobs' processes, and the grid's hops more than on an
idle machine.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import psutil

#: Supervisor child name prefix -> kind shown.
KINDS = (("gatekeeper", "gatekeepers"), ("node-", "node daemons"),
         ("scheduler", "scheduler workers"), ("beat", "beats"), ("flower", "flower"))


class CpuMeter:
    """CPU seconds so far, per kind, of a running :class:`EmbeddedStack`."""

    def __init__(self, stack: Any) -> None:
        self.procs: list[tuple[str, psutil.Process]] = []
        for child in stack.supervisor.children:
            kind = next((k for prefix, k in KINDS if child.name.startswith(prefix)), child.name)
            self.procs.append((kind, psutil.Process(child.pid)))
        if stack.redis.pid:
            self.procs.append(("redis", psutil.Process(stack.redis.pid)))
        self.client = psutil.Process()

    def sample(self) -> Counter[str]:
        """CPU seconds per kind, ``client`` (this process) and ``machine`` (all busy)."""
        got: Counter[str] = Counter()
        for kind, proc in self.procs:
            try:
                times = proc.cpu_times()
            except psutil.Error:  # restarted by the supervisor: its old time is gone
                continue
            got[kind] += times.user + times.system
        own = self.client.cpu_times()
        got["client"] = own.user + own.system
        machine = psutil.cpu_times()
        got["machine"] = sum(machine) - machine.idle - getattr(machine, "iowait", 0.0) \
            - getattr(machine, "guest", 0.0) - getattr(machine, "guest_nice", 0.0)
        return got


def report(spent: Counter[str], wall_s: float, jobs: int) -> None:
    """Print the mean CPU per job of a window summed over ``jobs`` jobs."""
    cores = psutil.cpu_count() or 1
    busy = spent.pop("machine")
    print(f"    CPU from submit to released, per job (mean of {jobs}): window "
          f"{wall_s / jobs * 1e3:.1f} ms wall; machine busy {busy / jobs * 1e3:.1f} ms = "
          f"{busy / wall_s:.2f} of {cores} cores")
    named = sum(spent.values())
    for kind, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"      {kind:<18} {seconds / jobs * 1e3:7.1f} ms")
    print(f"      {'jobs and the rest':<18} {(busy - named) / jobs * 1e3:7.1f} ms "
          "(the jobs' processes; the kernel; anything else on the machine)")
