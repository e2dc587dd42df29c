"""Shared helpers for the simulator tests: tiny SWF files and the shared traces."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

# The shared/ folder sits beside the repository checkout.
WORKLOADS = Path(__file__).resolve().parents[2] / ".." / "shared" / "workloads"

TRACES = {
    "SDSC-SP2": ("SDSC-SP2-1998-4.2-cln.swf.gz", 128),
    "CTC-SP2": ("CTC-SP2-1996-3.1-cln.swf.gz", 338),
    "KTH-SP2": ("KTH-SP2-1996-2.1-cln.swf.gz", 100),
}


def trace_path(name: str) -> Path:
    """Path of a shared trace; skips the test when the workloads are absent."""
    path = WORKLOADS / TRACES[name][0]
    if not path.exists():
        pytest.skip(f"shared workload trace {path.name} not found beside the checkout ({WORKLOADS})")
    return path


def swf_line(job: int, submit: int, run: float, procs: int, *, req_time: float = -1,
             req_procs: int = -1, alloc: int | None = None, user: int = 1, group: int = 1,
             queue: int = 1, status: int = 1) -> str:
    """One 18-field SWF job line."""
    fields = [job, submit, -1, run, procs if alloc is None else alloc, -1, -1, req_procs,
              req_time, -1, status, user, group, -1, queue, -1, -1, -1]
    return " ".join(str(f) for f in fields)


def write_swf(path: Path, lines: list[str], header: list[str] | None = None,
              gz: bool = False) -> Path:
    """Write an SWF file (optionally gzipped) with ``; `` header lines first."""
    text = "".join(f"; {h}\n" for h in (header or [])) + "".join(f"{line}\n" for line in lines)
    if gz:
        with gzip.open(path, "wt") as out:
            out.write(text)
    else:
        path.write_text(text)
    return path
