"""The HTTP server behind what ``journaled serve`` listens for on a TCP port: the status page
(``--http``, cli/statuspage.py) and the Prometheus metrics (``--metrics``).

It runs inside the owner, so nothing that reaches the port may take what the queue needs
(docs/design.md, "What listens on a port").  One thread owns every socket and reads requests
without blocking (a selector); a few worker threads compute the answers; so the limits are:

* at most ``max_connections`` connections (:data:`MAX_CONNECTIONS`); one more pushes out the
  connection that has waited longest for its next request (idle, or sending its headers slowly),
  and when every connection is being answered the new one is closed at once;
* a connection's descriptor is counted against the owner's: one whose number falls in the
  :data:`~journaled.remote.admission.FD_RESERVE` descriptors the owner keeps for its journal is
  closed at once, and when ``accept`` itself fails (EMFILE and the like) the listener rests for a
  while instead of spinning;
* the request line and headers must arrive within :data:`HEADER_TIMEOUT` seconds of the
  connection (or of the previous answer: an idle keep-alive connection has the same deadline),
  and fit in :data:`MAX_REQUEST` bytes; a request may carry no body (only GET and HEAD are served);
* at most :data:`MAX_WAITING` requests wait for a worker (then 503), and an answer must be taken
  by the client within :data:`SEND_TIMEOUT` seconds.

A client that goes away mid-answer is simply forgotten (no traceback).
"""

from __future__ import annotations

import collections
import logging
import queue
import resource
import selectors
import socket
import threading
import time
from collections.abc import Callable, Mapping
from http import HTTPStatus
from urllib.parse import parse_qs, urlsplit

import attrs

from journaled.remote.admission import FD_RESERVE

log = logging.getLogger("journaled")

#: connections held at once (each is one descriptor)
MAX_CONNECTIONS = 64
#: seconds for the request line and headers to arrive, from the connection or the previous answer
HEADER_TIMEOUT = 10.0
#: bytes of request line and headers at most
MAX_REQUEST = 16 * 1024
#: seconds a client has to take an answer
SEND_TIMEOUT = 30.0
#: threads computing answers, and requests that may wait for one
WORKERS = 2
MAX_WAITING = 16
#: the listen backlog (the kernel caps it at net.core.somaxconn)
BACKLOG = 4096
#: connections accepted per turn of the loop, so that reading goes on during a flood
ACCEPT_BATCH = 16
#: the listener's rest after ``accept`` failed (doubled while it fails, up to the second value)
ACCEPT_PAUSE = (0.05, 1.0)

_READING, _WORKING, _WRITING = range(3)


@attrs.frozen
class Request:
    """A request whose line and headers have arrived: ``headers`` by lower-case name."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: Mapping[str, str]
    local_host: str  # the address the connection arrived at (without the port)


@attrs.frozen
class Response:
    """What a handler answers."""

    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()


class _Conn:
    __slots__ = ("sock", "buf", "state", "deadline", "out", "keep", "events")

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.state = _READING
        self.deadline = deadline
        self.out = memoryview(b"")
        self.keep = False
        self.events = 0  # what the selector watches for (0: not registered)


def fd_limit() -> int | None:
    """The process's soft ``RLIMIT_NOFILE`` (None: unlimited)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else int(soft)


class BoundedHTTPServer:
    """Serve ``handle(request) -> Response`` on ``(host, port)`` (port 0: any free one,
    :attr:`port` says which) within the limits of the module docstring, until :meth:`close`.
    An address that cannot be listened on raises ``OSError`` before anything runs."""

    def __init__(
        self,
        host: str,
        port: int,
        handle: Callable[[Request], Response],
        name: str = "http",
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.handle, self.name, self.max_connections = handle, name, max_connections
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.create_server((host, port), family=family, backlog=BACKLOG)
        self._listener.setblocking(False)
        self.port = int(self._listener.getsockname()[1])
        #: figures for tests and logs: connections accepted, refused at once, pushed out for a
        #: newer one, closed at their deadline, and answers sent
        self.counts = collections.Counter[str]()
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel.register(self._listener, selectors.EVENT_READ, "listener")
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._conns: dict[int, _Conn] = {}  # oldest first: a keep-alive answer moves it to the end
        self._jobs: queue.Queue[tuple[_Conn, Request] | None] = queue.Queue()
        self._done: collections.deque[tuple[_Conn, bytes]] = collections.deque()
        self._stopping = False
        self._resting_until = 0.0  # the listener rests after a failed accept
        self._rest = 0.0
        self._workers = [
            threading.Thread(target=self._work, name=f"journaled-{name}-worker", daemon=True)
            for _ in range(WORKERS)
        ]
        for w in self._workers:
            w.start()
        self._thread = threading.Thread(target=self._loop, name=f"journaled-{name}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the loop
    def _loop(self) -> None:
        try:
            while not self._stopping:
                now = time.monotonic()
                for key, mask in self._sel.select(self._timeout(now)):
                    if key.data == "listener":
                        self._accept()
                    elif key.data == "wake":
                        try:
                            while self._wake_r.recv(4096):
                                pass
                        except BlockingIOError:
                            pass
                    elif mask & selectors.EVENT_WRITE:
                        self._write(key.data)
                    else:
                        self._read(key.data)
                self._answers()
                self._expire(time.monotonic())
        except Exception:  # the page is not worth the owner: log it and stop serving
            log.exception("journaled %s server stopped", self.name)
        finally:
            for conn in list(self._conns.values()):
                self._close(conn)

    def _timeout(self, now: float) -> float:
        wait = 1.0
        for conn in self._conns.values():
            if conn.state != _WORKING:
                wait = min(wait, conn.deadline - now)
        if self._resting_until:
            wait = min(wait, self._resting_until - now)
        return max(wait, 0.0)

    def _watch(self, conn: _Conn, events: int) -> None:
        if events == conn.events:
            return
        if not conn.events:
            self._sel.register(conn.sock, events, conn)
        elif not events:
            self._sel.unregister(conn.sock)
        else:
            self._sel.modify(conn.sock, events, conn)
        conn.events = events

    def _close(self, conn: _Conn) -> None:
        self._watch(conn, 0)
        self._conns.pop(conn.sock.fileno(), None)
        conn.state = -1
        conn.sock.close()

    def _accept(self) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                sock, _addr = self._listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:  # EMFILE, ENFILE, ENOBUFS: rest, do not spin
                self._rest = min(max(self._rest * 2, ACCEPT_PAUSE[0]), ACCEPT_PAUSE[1])
                if self._rest == ACCEPT_PAUSE[0]:
                    log.warning("journaled %s: cannot accept a connection (%s); resting", self.name, exc)
                self._resting_until = time.monotonic() + self._rest
                self._sel.unregister(self._listener)
                return
            self._rest = 0.0
            self.counts["accepted"] += 1
            if not self._admit(sock):
                self.counts["refused"] += 1
                sock.close()

    def _admit(self, sock: socket.socket) -> bool:
        limit = fd_limit()
        if limit is not None and sock.fileno() >= limit - FD_RESERVE:
            return False  # descriptors are given lowest first: this one is the journal's
        if len(self._conns) >= self.max_connections:
            oldest = next((c for c in self._conns.values() if c.state == _READING), None)
            if oldest is None:  # every one is being answered
                return False
            self.counts["pushed_out"] += 1
            self._close(oldest)
        sock.setblocking(False)
        conn = _Conn(sock, time.monotonic() + HEADER_TIMEOUT)
        self._conns[sock.fileno()] = conn
        self._watch(conn, selectors.EVENT_READ)
        self._read(conn)  # a real client's request has usually arrived with its connection
        return True

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._close(conn)
            return
        conn.buf += data
        self._parse(conn)

    def _parse(self, conn: _Conn) -> None:
        end = conn.buf.find(b"\r\n\r\n")
        if end < 0 or end + 4 > MAX_REQUEST:
            if len(conn.buf) > MAX_REQUEST:
                self._fail(conn, 431, "request too large")
            return
        head = bytes(conn.buf[:end]).decode("latin-1")
        del conn.buf[: end + 4]
        line, *fields = head.split("\r\n")
        parts = line.split(" ")
        if len(parts) != 3 or parts[2] not in ("HTTP/1.0", "HTTP/1.1"):
            self._fail(conn, 400, "malformed request line")
            return
        method, target, version = parts
        headers: dict[str, str] = {}
        for field in fields:
            key, sep, value = field.partition(":")
            if not sep or not key or key != key.strip():
                self._fail(conn, 400, "malformed header")
                return
            key = key.lower()
            if key in headers and key == "host":
                self._fail(conn, 400, "two Host headers")
                return
            headers[key] = value.strip() if key not in headers else f"{headers[key]}, {value.strip()}"
        if headers.get("content-length", "0") != "0" or "transfer-encoding" in headers:
            self._fail(conn, 413, "requests here carry no body")
            return
        if method not in ("GET", "HEAD"):
            self._fail(conn, 405, "only GET and HEAD")
            return
        connection = headers.get("connection", "").lower()
        conn.keep = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
        parts_ = urlsplit(target)
        try:
            local = str(conn.sock.getsockname()[0])
        except OSError:
            local = ""
        request = Request(method, parts_.path, parse_qs(parts_.query), headers, local)
        if self._jobs.qsize() >= MAX_WAITING:
            self._fail(conn, 503, "busy: try again")
            return
        conn.state = _WORKING
        self._watch(conn, 0)  # one request at a time: what follows waits in the kernel
        self._jobs.put((conn, request))

    def _fail(self, conn: _Conn, status: int, why: str) -> None:
        """Answer ``status`` at once and close the connection after it."""
        conn.keep = False
        conn.buf.clear()
        self._send(conn, _encode(Response(status, why.encode() + b"\n"), False, False))

    def _send(self, conn: _Conn, data: bytes) -> None:
        conn.state = _WRITING
        conn.out = memoryview(data)
        conn.deadline = time.monotonic() + SEND_TIMEOUT
        self._write(conn)

    def _write(self, conn: _Conn) -> None:
        try:
            sent = conn.sock.send(conn.out)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:  # gone mid-answer (EPIPE, ECONNRESET): nothing to tell anyone
            self._close(conn)
            return
        conn.out = conn.out[sent:]
        if conn.out:
            self._watch(conn, selectors.EVENT_WRITE)
            return
        self.counts["answered"] += 1
        if not conn.keep:
            self._close(conn)
            return
        conn.state = _READING
        conn.deadline = time.monotonic() + HEADER_TIMEOUT  # the idle keep-alive deadline
        fd = conn.sock.fileno()
        self._conns[fd] = self._conns.pop(fd)  # the newest again
        self._watch(conn, selectors.EVENT_READ)
        if conn.buf:
            self._parse(conn)

    def _answers(self) -> None:
        while self._done:
            conn, data = self._done.popleft()
            if conn.state == _WORKING:
                self._send(conn, data)

    def _expire(self, now: float) -> None:
        for conn in [c for c in self._conns.values() if c.state != _WORKING and c.deadline <= now]:
            self.counts["timed_out"] += 1
            self._close(conn)
        if self._resting_until and now >= self._resting_until:
            self._resting_until = 0.0
            self._sel.register(self._listener, selectors.EVENT_READ, "listener")

    # ------------------------------------------------------------------ the workers
    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            conn, request = job
            try:
                answer = self.handle(request)
            except Exception:
                log.exception("journaled %s: answering %s failed", self.name, request.path)
                answer = Response(500, b"internal error\n")
            self._done.append((conn, _encode(answer, conn.keep, request.method == "HEAD")))
            try:
                self._wake_w.send(b"\0")
            except OSError:  # the loop has its wake-ups pending already (or is closed)
                pass

    def close(self) -> None:
        """Stop serving and close every connection and the listener."""
        self._stopping = True
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass
        self._thread.join()
        for _ in self._workers:
            self._jobs.put(None)
        for w in self._workers:
            w.join(timeout=5.0)
        self._sel.close()
        for s in (self._listener, self._wake_r, self._wake_w):
            s.close()


def _encode(answer: Response, keep: bool, head: bool) -> bytes:
    try:
        reason = HTTPStatus(answer.status).phrase
    except ValueError:
        reason = ""
    lines = [
        f"HTTP/1.1 {answer.status} {reason}",
        f"Content-Type: {answer.content_type}",
        f"Content-Length: {len(answer.body)}",
        "Connection: " + ("keep-alive" if keep else "close"),
        *(f"{k}: {v}" for k, v in answer.headers),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (b"" if head else answer.body)


def host_allowed(request: Request, bound: str, extra: frozenset[str]) -> bool:
    """Whether ``request``'s ``Host`` names this server: the address it is bound to, the address
    the connection arrived at, a loopback name, or one of ``extra`` (a page read through any
    other name may be a web site's, by DNS rebinding).  A request without ``Host`` (not a
    browser's) is let through."""
    given = request.headers.get("host")
    if given is None:
        return True
    if given.startswith("["):  # [::1]:port
        name = given[1 : given.find("]")] if "]" in given else given
    else:
        name = given.rpartition(":")[0] if given.count(":") == 1 else given
    name = name.lower().rstrip(".")
    return name in {"localhost", "127.0.0.1", "::1", bound.lower(), request.local_host.lower()} | extra


__all__ = ["BoundedHTTPServer", "Request", "Response", "host_allowed"]
