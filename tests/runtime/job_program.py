"""A process of a coallocated job, as the job manager would start it (tests only).

``python job_program.py SCENARIO``; reads the runtime variables like any job.
Prints one JSON line of observations on stdout and exits 0, or lets the typed
error escape (exit 1) as a job that must not run past the barrier would.

Scenarios:

* ``full`` - barrier, then intra-subjob tags sent 3,1,2 and received 2,1,3 around
  a ring; rank 0: inter-subjob structure, bootstrap exchange, a message to every
  other subjob; ranks > 0: check that inter-subjob calls are refused.
* ``barrier`` - barrier only; prints the wall-clock time it passed.
* ``ring`` - the intra-subjob ring without ever calling barrier (no-barrier subjobs).
"""

from __future__ import annotations

import json
import sys
import time

from grid_tasks import runtime


def ring(rank: int, size: int) -> dict[str, str]:
    """Send tags 3,1,2 to the next rank; receive them from the previous as 2,1,3."""
    nxt, prev = (rank + 1) % size, (rank - 1) % size
    for tag in ("t3", "t1", "t2"):
        runtime.intra_subjob_send(nxt, tag, f"{tag} from {rank}".encode())
    got = {}
    for tag in ("t2", "t1", "t3"):
        message = runtime.intra_subjob_receive_message(tag, timeout=20)
        assert message.sender == prev, (message, prev)
        got[tag] = message.data.decode()
    return got


def rank_zero(label: str) -> dict[str, object]:
    group = runtime.inter_subjob_structure(timeout=20)
    infos = runtime.bootstrap_subjob_exchange(f"{label}:{runtime.intra_subjob_size()}".encode(),
                                              timeout=20)
    for address in group.remote_addresses:
        runtime.inter_subjob_send(address, "hello", f"hello from {label}".encode())
    hellos = sorted(runtime.inter_subjob_receive("hello", timeout=20).decode()
                    for _ in group.remote_addresses)
    return {"group": [s.label for s in group.subjobs], "local": group.local_address,
            "remotes": list(group.remote_addresses),
            "infos": [i.decode() for i in infos], "hellos": hellos}


def refused_inter() -> list[str]:
    refused = []
    for call in (lambda: runtime.inter_subjob_structure(timeout=1),
                 lambda: runtime.inter_subjob_send(0, "x", b"x"),
                 lambda: runtime.inter_subjob_receive("x", timeout=1),
                 lambda: runtime.bootstrap_subjob_exchange(b"x", timeout=1)):
        try:
            call()
        except runtime.NotRankZeroError:
            refused.append("NotRankZeroError")
    return refused


def main(scenario: str) -> None:
    if scenario == "ring":
        rank, size = runtime.intra_subjob_rank(), runtime.intra_subjob_size()
        print(json.dumps({"rank": rank, "ring": ring(rank, size)}), flush=True)
        return
    structure = runtime.barrier()
    passed = time.time()
    rank, size = runtime.intra_subjob_rank(), runtime.intra_subjob_size()
    out: dict[str, object] = {"rank": rank, "size": size, "passed": passed,
                              "version": structure.version if structure else None}
    if scenario == "full":
        label = runtime.current().env.label
        out["ring"] = ring(rank, size)
        out.update(rank_zero(label) if rank == 0 else {"refused": refused_inter()})
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
