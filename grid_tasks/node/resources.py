"""Resource detection and host facts of the machine a node daemon runs on."""

from __future__ import annotations

import os
import platform
import socket
import sys
from pathlib import Path

import psutil

MB = 1024 * 1024


def detect_resources(disk_path: str | Path = "/") -> dict[str, object]:
    """Processors, memory, disk (of ``disk_path``) and swap of this host, in MB.

    Same keys as :meth:`grid_tasks.topology.NodeSpec.resources`, so a node
    without a configured spec registers detected values in the same shape.
    """
    try:
        disk = psutil.disk_usage(str(disk_path)).total // MB
    except OSError:
        disk = 0  # an unreadable mount is reported as no scratch disk
    return {
        "procs": psutil.cpu_count(logical=True) or 1,
        "memory_mb": psutil.virtual_memory().total // MB,
        "disk_mb": disk,
        "swap_mb": psutil.swap_memory().total // MB,
        "features": [],
        "attributes": {"arch": platform.machine(), "os": platform.system().lower()},
    }


def host_facts() -> dict[str, object]:
    """Who and where this daemon is, plus current load (for the node check)."""
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = []
    vm = psutil.virtual_memory()
    return {
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "platform": platform.platform(),
        "arch": platform.machine(),
        "python": sys.version.split()[0],
        "boot_time": psutil.boot_time(),
        "load_average": load,
        "cpu_percent": psutil.cpu_percent(interval=None),
        "memory_available_mb": vm.available // MB,
    }
