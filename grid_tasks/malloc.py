"""glibc's allocator in a worker process: big blocks go back to the system when freed.

A scheduler iterating a deep queue allocates and frees blocks of megabytes every
iteration (the queue's dicts, lists and numpy columns of 100,000 jobs).  glibc raises
its mmap threshold each time such a block is freed, so later ones come from the heap,
where small long-lived objects allocated meanwhile pin them: the process kept the peak
of every iteration (scale_queue.py: 1.1-1.5 KB of RSS per queued job where the live
objects take 0.6).  A fixed threshold keeps every block from :data:`MMAP_THRESHOLD`
on in its own mapping, returned when freed (0.8 KB per job), for a few page faults
per big block (about 0.05 s of CPU per iteration of 100,000 jobs).

ctypes, glibc only: elsewhere (or if ``mallopt`` is missing) nothing changes.
"""

from __future__ import annotations

import ctypes
import sys

#: glibc's ``M_MMAP_THRESHOLD`` parameter of ``mallopt``.
M_MMAP_THRESHOLD = -3
#: Blocks from this size on are mapped on their own (glibc's initial default, kept).
MMAP_THRESHOLD = 128 * 1024


def return_big_blocks() -> bool:
    """Fix glibc's mmap threshold at :data:`MMAP_THRESHOLD` for this process; whether
    it was set (False off Linux or without glibc's ``mallopt``)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own C library
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
