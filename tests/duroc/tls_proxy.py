"""A TLS-terminating TCP proxy in front of a plain private Redis, for TLS client tests.

Used where the redis-server binary was built without TLS (then the TLS-only
servers of tests/security skip): the client still does a real TLS handshake and
certificate check, against a certificate of ``TLSFiles``.
"""

from __future__ import annotations

import select
import socket
import ssl
import threading
from contextlib import suppress

from tests.security.redis_helpers import TLSFiles


class TLSProxy:
    """Accepts TLS on ``port`` and relays each connection to ``127.0.0.1:target``."""

    def __init__(self, target: int, tls: TLSFiles) -> None:
        self.target = target
        self.tls = tls
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(str(tls.server_cert), str(tls.server_key))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                raw, _ = self.listener.accept()
            except OSError:  # closed: stop
                return
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        try:
            client = self.context.wrap_socket(raw, server_side=True)
        except (OSError, ssl.SSLError):  # the client refused our certificate
            raw.close()
            return
        upstream = socket.create_connection(("127.0.0.1", self.target))
        self.sockets += [client, upstream]
        _relay(client, upstream)

    def close(self) -> None:
        self.listener.close()
        for sock in self.sockets:
            with suppress(OSError):
                sock.close()


def _relay(client: ssl.SSLSocket, upstream: socket.socket) -> None:
    """Copy both ways until either side closes, in one thread (an SSL socket must not be
    read and written by two threads at once); then close both."""
    other = {client: upstream, upstream: client}
    with suppress(OSError, ValueError):
        while True:
            ready = [client] if client.pending() else select.select([client, upstream],
                                                                   [], [])[0]
            for source in ready:
                data = source.recv(65536)
                if not data:
                    raise OSError("closed")
                other[source].sendall(data)
    for sock in (client, upstream):
        with suppress(OSError):
            sock.close()
