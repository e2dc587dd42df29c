"""A minimal synchronous RESP2 client: what a coallocated job's processes need of Redis.

Every process of a subjob imports :mod:`grid_tasks.runtime` before entering the start
barrier, and importing redis-py alone takes over 100 ms (asyncio, ssl,
importlib.metadata...).  The job side runs a handful of commands (EVALSHA, XREAD,
BLPOP, HMGET, EXISTS), so it speaks RESP2 itself; the methods below mirror redis-py's
for those calls, reply shapes included, so ``CoordinationStore`` takes either client.
The control side keeps redis-py.

Thread-safe like redis-py: each concurrent command takes its own connection (idle ones
wait in a list), so several threads may block in BLPOP or XREAD at once.  No read
timeout (blocking commands block); connecting times out after :data:`CONNECT_TIMEOUT_S`.
``ssl`` is imported only for a ``rediss://`` URL.
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from contextlib import suppress
from typing import Any, BinaryIO
from urllib.parse import parse_qs, unquote, urlsplit

CONNECT_TIMEOUT_S = 5.0
#: A server that refuses connections is tried again for this long (seconds), with
#: growing pauses: a job rides out a short Redis restart, as redis-py's retries let it.
RECONNECT_S = 2.0
_CLOSED = "Connection closed by server."  # redis-py's words
# Error codes redis-py strips from its exception messages (its EXCEPTION_CLASSES);
# others (our scripts' "GTERR ...") stay in the text: translated() matches on both.
_STRIPPED_CODES = frozenset(
    "ERR OOM WRONGPASS EXECABORT LOADING NOSCRIPT READONLY NOAUTH NOPERM ASK TRYAGAIN "
    "MOVED CLUSTERDOWN CROSSSLOT MASTERDOWN".split())


class RespError(Exception):
    """Root of this client's errors."""


class RespConnectionError(RespError):
    """The server cannot be reached, or the connection broke."""


class RespAuthenticationError(RespConnectionError):
    """The server refused the credentials (like redis-py's, a connection error)."""


class RespResponseError(RespError):
    """The server answered a command with an error."""


class RespNoPermissionError(RespResponseError):
    """NOPERM: the ACL user may not run that command or touch that key."""


class RespNoScriptError(RespResponseError):
    """NOSCRIPT: the script is not in the server's cache."""


_ERROR_CLASSES: dict[str, type[RespError]] = {
    "NOPERM": RespNoPermissionError, "NOSCRIPT": RespNoScriptError,
    "WRONGPASS": RespAuthenticationError, "NOAUTH": RespAuthenticationError,
}


def error_from_reply(text: str) -> RespError:
    """The exception for an error reply, its message as redis-py words it."""
    code = text.split(" ", 1)[0]
    message = text[len(code) + 1:] if code in _STRIPPED_CODES else text
    return _ERROR_CLASSES.get(code, RespResponseError)(message)


def encode_command(args: Iterable[Any]) -> bytes:
    """A command as a RESP array of bulk strings (str as UTF-8, numbers as repr)."""
    parts = []
    for arg in args:
        if isinstance(arg, (bytes, bytearray, memoryview)):
            data = bytes(arg)
        elif isinstance(arg, str):
            data = arg.encode()
        elif isinstance(arg, (int, float)) and not isinstance(arg, bool):
            data = repr(arg).encode()
        else:  # redis-py refuses these too (bool, None, ...): never guess a wire form
            raise TypeError(f"invalid Redis command argument {arg!r}")
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"*%d\r\n" % len(parts) + b"".join(parts)


def read_reply(reader: BinaryIO) -> Any:
    """One reply; an error reply is *returned* as a :class:`RespError` (see ``request``)."""
    line = reader.readline()
    if not line.endswith(b"\r\n"):
        raise RespConnectionError(_CLOSED)
    kind, body = line[:1], line[1:-2]
    if kind == b"+":
        return body
    if kind == b"-":
        return error_from_reply(body.decode(errors="replace"))
    if kind not in (b":", b"$", b"*") or not body.lstrip(b"-").isdigit():
        raise RespConnectionError(f"Protocol error, got {line[:64]!r}")
    number = int(body)
    if kind == b":":
        return number
    if number < 0:  # a nil bulk string or array
        return None
    if kind == b"*":
        return [read_reply(reader) for _ in range(number)]
    data = reader.read(number + 2)
    if len(data) != number + 2:
        raise RespConnectionError(_CLOSED)
    return data[:-2]


class _Connection:
    """One socket, its buffered reader, and the pool generation it belongs to."""

    def __init__(self, sock: socket.socket, generation: int) -> None:
        self.sock = sock
        self.reader = sock.makefile("rb")
        self.generation = generation

    def request(self, payload: bytes) -> Any:
        try:
            self.sock.sendall(payload)
            return read_reply(self.reader)
        except OSError as exc:
            raise RespConnectionError(f"Error while talking to the server: {exc}") from None

    def close(self) -> None:
        for closer in (self.reader.close, self.sock.close):
            with suppress(OSError):
                closer()


class RespScript:
    """A Lua script run by EVALSHA, loaded on NOSCRIPT (like redis-py's ``Script``)."""

    def __init__(self, client: "RespClient", source: str) -> None:
        self.client = client
        self.script = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()  # as the server names it

    def __call__(self, keys: Iterable[Any] = (), args: Iterable[Any] = ()) -> Any:
        keys, args = list(keys), list(args)
        try:
            return self.client.execute_command("EVALSHA", self.sha, len(keys), *keys, *args)
        except RespNoScriptError:
            # a job user may not SCRIPT LOAD: its NOPERM error tells the cache is empty
            self.client.script_load(self.script)
            return self.client.execute_command("EVALSHA", self.sha, len(keys), *keys, *args)


class RespClient:
    """A small pool of RESP2 connections to one Redis database (see the module doc)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 6379, *, path: str | None = None,
                 db: int = 0, username: str | None = None, password: str | None = None,
                 tls: Any = None, reconnect_s: float = RECONNECT_S) -> None:
        """``path``: a unix socket instead of host/port; ``tls``: a ``RedisTLS`` for TLS;
        ``reconnect_s``: how long a refused connection is tried again."""
        self.host, self.port, self.path, self.db = host, port, path, db
        self.reconnect_s = reconnect_s
        self.username, self.password, self.tls = username, password, tls
        self._ssl_context: Any = None  # made on the first TLS connection
        self._lock = threading.Lock()
        self._idle: list[_Connection] = []
        self._generation = 0
        self._pid = os.getpid()

    @classmethod
    def from_url(cls, url: str, environ: Mapping[str, str] | None = None,
                 **kwargs: Any) -> "RespClient":
        """A client for ``redis://``, ``rediss://`` or ``unix://`` (``?db=&username=&password=``).

        A ``rediss://`` URL takes its TLS options from the ``GRID_TASKS_REDIS_TLS_*``
        variables of ``environ`` (default: this process's environment).  A malformed
        URL raises ValueError; nothing is contacted until the first command.  ``kwargs``
        go to the constructor (``reconnect_s``).
        """
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        options: dict[str, Any] = {
            "username": unquote(parts.username) if parts.username else query.get("username"),
            "password": unquote(parts.password) if parts.password else query.get("password")}
        # as redis-py: ?db= wins over the path, which names the socket for unix://
        db = query.get("db") or (parts.path.strip("/") if scheme != "unix" else "")
        options["db"] = int(db or 0)  # ValueError for a non-integer db
        if scheme == "unix":
            if not parts.path:
                raise ValueError(f"no socket path in {url!r}")
            return cls(path=parts.path, **options, **kwargs)
        if scheme not in ("redis", "rediss"):
            raise ValueError("Redis URL must specify one of the following schemes "
                             "(redis://, rediss://, unix://)")
        if scheme == "rediss":
            from grid_tasks.security.config import RedisTLS  # imports ssl: TLS only

            options["tls"] = RedisTLS.from_env(os.environ if environ is None else environ)
        return cls(parts.hostname or "localhost", parts.port or 6379, **options, **kwargs)

    # -- commands (the redis-py subset the coordination store uses) ------------------------

    def execute_command(self, *args: Any) -> Any:
        """Run one command; its reply, or its error raised as a :class:`RespError`."""
        payload = encode_command(args)
        conn, reused = self._acquire()
        try:
            reply = self._attempt(conn, payload)
        except RespConnectionError:
            if not reused:
                raise
            # An idle connection the server closed meanwhile (timeout, CLIENT KILL,
            # restart): retry once on a fresh one, whose failure is then real.
            reply = self._attempt(self._connect(), payload)
        if isinstance(reply, RespError):
            raise reply
        return reply

    def register_script(self, source: str) -> RespScript:
        return RespScript(self, source)

    def xread(self, streams: Mapping[Any, Any], block: int | None = None) -> list[list[Any]]:
        """XREAD in redis-py's shape: ``[[stream, [(id, {field: value}), ...]], ...]``."""
        args: list[Any] = ["XREAD"] if block is None else ["XREAD", "BLOCK", block]
        reply = self.execute_command(*args, "STREAMS", *streams.keys(), *streams.values())
        return [[name, [(entry_id, _pairs(fields)) for entry_id, fields in entries]]
                for name, entries in reply or ()]

    def blpop(self, keys: Any, timeout: float | None = 0) -> tuple[bytes, bytes] | None:
        """(key, value) popped, or None after ``timeout`` seconds (a float: Redis >= 6)."""
        keys = [keys] if isinstance(keys, (str, bytes)) else list(keys)
        reply = self.execute_command("BLPOP", *keys, 0 if timeout is None else timeout)
        return None if reply is None else (reply[0], reply[1])

    def hmget(self, name: Any, keys: Any, *args: Any) -> list[bytes | None]:
        keys = [keys] if isinstance(keys, (str, bytes)) else list(keys)
        return self.execute_command("HMGET", name, *keys, *args)

    def exists(self, *names: Any) -> int:
        return self.execute_command("EXISTS", *names)

    def script_exists(self, *shas: str) -> list[bool]:
        return [bool(flag) for flag in self.execute_command("SCRIPT", "EXISTS", *shas)]

    def script_load(self, source: str) -> str:
        return self.execute_command("SCRIPT", "LOAD", source).decode()

    def ping(self) -> bool:
        return self.execute_command("PING") == b"PONG"

    def close(self) -> None:
        """Close the idle connections; busy ones close when their command ends."""
        with self._lock:
            idle, self._idle = self._idle, []
            self._generation += 1
        for conn in idle:
            conn.close()

    # -- the pool --------------------------------------------------------------------------

    def _acquire(self) -> tuple[_Connection, bool]:
        """A connection for one command, and whether it came from the idle list."""
        if self._pid != os.getpid():
            # forked: the parent's sockets are not ours to talk on (nor is its lock)
            self._lock, self._idle, self._pid = threading.Lock(), [], os.getpid()
        with self._lock:
            if self._idle:
                return self._idle.pop(), True  # the most recent one: likeliest alive
        return self._connect(), False

    def _attempt(self, conn: _Connection, payload: bytes) -> Any:
        """``payload``'s reply on ``conn``; then pooled, or closed on any failure."""
        try:
            reply = conn.request(payload)
        except BaseException:  # broken, or interrupted mid-reply: its state is unknown
            conn.close()
            raise
        with self._lock:
            if conn.generation == self._generation:
                self._idle.append(conn)
                return reply
        conn.close()  # the client was closed while the command ran
        return reply

    def _connect(self) -> _Connection:
        """A new connection, authenticated and on our database."""
        conn = _Connection(self._open_socket_retrying(), self._generation)
        auth = (self.username, self.password or "") if self.username else (self.password,)
        try:
            if self.username or self.password:
                reply = conn.request(encode_command(("AUTH", *auth)))
                if isinstance(reply, RespError):  # whatever the code: not these credentials
                    raise RespAuthenticationError(str(reply))
            if self.db:
                reply = conn.request(encode_command(("SELECT", self.db)))
                if isinstance(reply, RespError):
                    raise reply
        except BaseException:
            conn.close()
            raise
        return conn

    def _open_socket_retrying(self) -> socket.socket:
        """A socket, trying again for ``reconnect_s`` while the server cannot be reached:
        nothing was sent yet, so any command may wait for it."""
        deadline, pause = time.monotonic() + self.reconnect_s, 0.05
        while True:
            try:
                return self._open_socket()
            except RespConnectionError:
                if time.monotonic() + pause > deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.5)

    def _open_socket(self) -> socket.socket:
        where = self.path or f"{self.host}:{self.port}"
        sock = None
        try:
            if self.path:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(CONNECT_TIMEOUT_S)
                sock.connect(self.path)
            else:
                sock = socket.create_connection((self.host, self.port), CONNECT_TIMEOUT_S)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self.tls is not None:  # the handshake stays under the connect timeout
                    if self._ssl_context is None:  # a missing file fails the connection
                        self._ssl_context = self.tls.ssl_context()
                    sock = self._ssl_context.wrap_socket(sock, server_hostname=self.host)
            sock.settimeout(None)  # blocking commands block for as long as they were told
            return sock
        except OSError as exc:
            if sock is not None:
                sock.close()  # (the plain one, if the TLS handshake failed)
            raise RespConnectionError(_connect_error(where, exc)) from None


def _pairs(fields: list[bytes] | None) -> dict[bytes, bytes] | None:
    return None if fields is None else dict(zip(fields[::2], fields[1::2]))


def _connect_error(where: str, exc: OSError) -> str:
    """redis-py's wording, e.g. "Error 111 connecting to 127.0.0.1:1. Connection refused."."""
    if isinstance(exc, TimeoutError):
        return f"Timeout connecting to {where}"
    if isinstance(exc, FileNotFoundError) and exc.filename:  # a TLS file (or the socket)
        return f"Error {exc.errno} connecting to {where}. {exc.strerror}: {exc.filename}."
    if len(exc.args) >= 2:
        return f"Error {exc.args[0]} connecting to {where}. {exc.args[1]}."
    return f"Error connecting to {where}. {exc}."
