"""A small HTTP endpoint serving ``/metrics`` (collected afresh on every scrape)."""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from grid_tasks.errors import ConnectivityError
from grid_tasks.metrics.collect import collect
from grid_tasks.metrics.exposition import CONTENT_TYPE, render
from grid_tasks.settings import Settings
from grid_tasks.topology import GridTopology, load_topology

log = logging.getLogger(__name__)

DEFAULT_PORT = 9464
_INDEX = (b"<html><head><title>grid_tasks metrics</title></head><body>"
          b"<h1>grid_tasks</h1><p><a href=\"/metrics\">/metrics</a></p></body></html>")


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"

    def do_GET(self) -> None:  # noqa: N802 - the http.server spelling
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            body = render(collect(self.server.settings, topology=self.server.topology)).encode()
            self._reply(200, CONTENT_TYPE, body)
        elif path == "/":
            self._reply(200, "text/html; charset=utf-8", _INDEX)
        else:
            self._reply(404, "text/plain; charset=utf-8", b"not found: try /metrics\n")

    def _reply(self, code: int, ctype: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("metrics %s " + fmt, self.client_address[0], *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], settings: Settings,
                 topology: GridTopology) -> None:
        super().__init__(address, _Handler)
        self.settings = settings
        self.topology = topology


class MetricsServer:
    """``/metrics`` on ``host:port`` (port 0 picks a free one); start() runs it in a thread."""

    def __init__(self, settings: Settings, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
                 topology: GridTopology | None = None) -> None:
        topology = topology or load_topology(settings.topology_file)
        try:
            self._server = _Server((host, port), settings, topology)
        except OSError as exc:
            raise ConnectivityError(f"cannot serve metrics on {host}:{port}: "
                                    f"{exc.strerror or exc}") from None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/metrics"

    def start(self) -> "MetricsServer":
        """Serve in a daemon thread; returns at once."""
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics",
                                        daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until :meth:`stop` or Ctrl-C."""
        self._server.serve_forever()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


def start_metrics_server(settings: Settings, host: str = "127.0.0.1",
                         port: int = DEFAULT_PORT) -> MetricsServer:
    """Start ``/metrics`` for ``settings`` in a background thread (e.g. from ``grid-tasks up``)."""
    return MetricsServer(settings, host, port).start()
