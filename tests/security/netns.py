"""Another host on this machine: a network namespace joined to ours by a veth pair.

:func:`network_namespace` makes a namespace with unique names and a free /30 of
10.200.0.0/16 (the root side ``.1``, the namespace side ``.2``) and removes both
namespace and link on the way out, even when the test failed.  :func:`tcp_relay`
makes a service that listens on loopback only (e.g. a PostgreSQL server) reachable
from the namespace at the root side's address.
"""

from __future__ import annotations

import random
import secrets
import shutil
import socket
import socketserver
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

IP = shutil.which("ip")


@dataclass(frozen=True)
class Link:
    """A namespace and the two ends of its veth link."""

    namespace: str
    root_if: str  # the veth end in the root namespace (deleting it deletes the pair)
    root_addr: str  # the grid's side, in this (the root) namespace
    ns_addr: str  # the node's side, inside ``namespace``

    def exec_argv(self, argv: list[str]) -> list[str]:
        """``argv`` run inside the namespace (``ip netns exec`` execs it: same PID)."""
        return [str(IP), "netns", "exec", self.namespace, *argv]


def _ip(*args: str) -> str:
    done = subprocess.run([str(IP), *args], capture_output=True, text=True, timeout=20)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def _free_subnet() -> tuple[str, str]:
    """Two addresses of a /30 in 10.200.0.0/16 that no interface here uses yet."""
    used = _ip("-o", "-4", "addr", "show")
    for _ in range(50):
        third, fourth = random.randrange(256), 4 * random.randrange(64)
        prefix = f"10.200.{third}."
        if f"{prefix}{fourth + 1}/" not in used and f"{prefix}{fourth + 2}/" not in used:
            return f"{prefix}{fourth + 1}", f"{prefix}{fourth + 2}"
    raise RuntimeError("no free /30 in 10.200.0.0/16")


def namespace_exists(name: str) -> bool:
    return name in _ip("netns", "list").split()


def link_exists(name: str) -> bool:
    return subprocess.run([str(IP), "link", "show", name], capture_output=True).returncode == 0


@contextmanager
def network_namespace() -> Iterator[Link]:
    """A fresh namespace ``gtn<hex>`` linked by veth ``gtv<hex>r``/``gtv<hex>n``."""
    tag = secrets.token_hex(3)
    namespace, root_if, ns_if = f"gtn{tag}", f"gtv{tag}r", f"gtv{tag}n"
    root_addr, ns_addr = _free_subnet()
    try:
        _ip("netns", "add", namespace)
        _ip("link", "add", root_if, "type", "veth", "peer", "name", ns_if)
        _ip("link", "set", ns_if, "netns", namespace)
        _ip("addr", "add", f"{root_addr}/30", "dev", root_if)
        _ip("link", "set", root_if, "up")
        _ip("-n", namespace, "addr", "add", f"{ns_addr}/30", "dev", ns_if)
        _ip("-n", namespace, "link", "set", ns_if, "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
        yield Link(namespace, root_if, root_addr, ns_addr)
    finally:
        # deleting one end of a veth pair deletes both; the namespace goes last
        subprocess.run([str(IP), "link", "del", root_if], capture_output=True)
        subprocess.run([str(IP), "netns", "del", namespace], capture_output=True)


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@contextmanager
def tcp_relay(listen_host: str, target: tuple[str, int]) -> Iterator[int]:
    """Accept on ``listen_host`` (a free port, yielded) and relay each connection to
    ``target``: what only listens on loopback becomes reachable over the link."""

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            with socket.create_connection(target, timeout=10) as upstream:
                upstream.settimeout(None)
                back = threading.Thread(target=_pump, args=(upstream, self.request),
                                        daemon=True)
                back.start()
                _pump(self.request, upstream)
                back.join(10)

    server = socketserver.ThreadingTCPServer((listen_host, 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
