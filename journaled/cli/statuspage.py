"""The status page of ``journaled serve ... --http HOST:PORT``: a small read-only HTML page and the
JSON it is drawn from, served by the standard library's HTTP server (no framework, no build step).

* ``/`` the page: per queue its health, clients, put rate, journal size, and per reader the
  backlog, commit rate, oldest age, open reads, delayed items and dead letters, with the backlog
  and rates plotted over the last :data:`HISTORY_SECONDS` (the page's own script draws SVG);
  the newest dead letters of each reader's dead-letter queue, with their reasons.
* ``/api/status`` that JSON (the page asks for it every two seconds).
* ``/metrics`` the Prometheus exposition, when a ``metrics`` function is given.

**Access.**  Bound to 127.0.0.1 unless told otherwise.  Any local user can connect to a local
port, so every request needs the token printed at start (as Jupyter does): ``?token=...`` on the
first visit, which sets a cookie (``HttpOnly``, ``SameSite=Strict``) for the rest; or an
``Authorization: Bearer ...`` header for a scraper.  Without a token the answer is 401, with a
wrong one 403.  ``token=None`` (``--no-token``) opts out.  Payloads are never shown unless
``peek`` (``--peek``), and then escaped, at most :data:`PEEK_BYTES` of each.  Nothing here
changes a queue: every route only reads stats and the dead-letter queues' files.
"""

from __future__ import annotations

import hmac
import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from http import cookies
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

import attrs

from journaled.cli.inspection import escape

#: how far back the page's plots reach, and how often a sample is taken for them
HISTORY_SECONDS = 600
SAMPLE_EVERY = 2.0
#: at most this many dead letters listed per dead-letter queue, and payload bytes shown per item
DEAD_LETTERS_SHOWN = 20
PEEK_BYTES = 200
_COOKIE = "journaled_token"


def _page() -> bytes:
    """The page (journaled/cli/status.html: no template, it draws itself from ``/api/status``)."""
    return resources.files("journaled.cli").joinpath("status.html").read_bytes()


class History:
    """Samples of every queue's figures, the newest :data:`HISTORY_SECONDS` of them, taken by a
    daemon thread every :data:`SAMPLE_EVERY` seconds (``lock`` guards ``samples``)."""

    def __init__(self, queues: Sequence[Any]) -> None:
        self.queues = queues
        self.lock = threading.Lock()
        self.samples: deque[dict[str, Any]] = deque(maxlen=int(HISTORY_SECONDS / SAMPLE_EVERY) + 1)
        self.stop = threading.Event()
        self.take()
        self.thread = threading.Thread(target=self._run, name="journaled-status-history", daemon=True)
        self.thread.start()

    def take(self) -> None:
        at = time.time()
        point: dict[str, Any] = {"t": at, "queues": {}}
        for q in self.queues:
            try:
                st = q.stats()
            except Exception:  # a closed or lost queue: a gap in its plot, not a dead thread
                continue
            path = q.path
            point["queues"][path] = {
                "next_id": st.next_id,
                "readers": {r.name: [r.backlog_items, r.committed] for r in st.readers},
            }
        with self.lock:
            self.samples.append(point)

    def _run(self) -> None:
        while not self.stop.wait(SAMPLE_EVERY):
            self.take()

    def copy(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.samples)


def _dead_letters(dead: Any, peek: bool) -> list[dict[str, Any]]:
    """The newest dead letters of the dead-letter queue ``dead`` (a queue object or a path), read
    from its newest files without taking it (a dead letter redriven since is still listed until
    its file is archived); [] if it cannot be read."""
    from journaled.deadletter import DeadLetter
    from journaled.offline.scan import JournalScanner
    from journaled.offline.snapshot import queue_name

    path = getattr(dead, "path", dead)
    if not isinstance(path, str):
        return []
    newest: deque[Any] = deque(maxlen=DEAD_LETTERS_SHOWN)
    try:
        scanner = JournalScanner(path, queue_name(path, None))
        starts = [f.header.first_id for f in scanner.files() if f.header is not None]
        # the newest file first, one more back if it holds too few: never the whole journal
        for start in (starts[-1:] + starts[-2:-1]) if starts else []:
            newest.clear()
            newest.extend(scanner.records(start))
            if len(newest) >= DEAD_LETTERS_SHOWN:
                break
    except Exception:
        return []
    out = []
    for rec in reversed(newest):
        try:
            letter = DeadLetter.decode(rec.payload)
        except Exception:
            continue
        entry = {
            "id": rec.id,
            "kind": letter.kind,
            "reason": letter.reason,
            "reader": letter.reader,
            "original_id": letter.id,
            "error_count": letter.error_count,
            "at": rec.add_ms / 1000,
        }
        if peek:
            entry["payload"] = escape(letter.data[:PEEK_BYTES].decode("utf-8", "replace"))
        out.append(entry)
    return out


def status(queues: Sequence[Any], history: History, peek: bool) -> dict[str, Any]:
    """What ``/api/status`` answers: every queue's stats, its dead letters, and the history."""
    out = []
    for q in queues:
        try:
            st = q.stats()
        except Exception as exc:
            out.append({"path": q.path, "error": str(exc)})
            continue
        dead: dict[str, list[dict[str, Any]]] = {}
        for name in sorted(r.name for r in st.readers):
            try:
                target = q.reader_settings(name).get("dead_letter")
            except Exception:
                target = None
            where = target.get("queue") if isinstance(target, dict) else None
            if isinstance(where, str):
                full = where if os.path.isabs(where) else os.path.normpath(os.path.join(q.path, where))
                dead[name] = _dead_letters(full, peek)
        out.append({"path": q.path, "stats": attrs.asdict(st, recurse=True), "dead_letters": dead})
    return {"now": time.time(), "queues": out, "history": history.copy(), "peek": peek}


class StatusServer:
    """The page's HTTP server on ``(host, port)`` (0: any free port; :attr:`port` says which),
    serving until :meth:`close`."""

    def __init__(
        self,
        queues: Sequence[Any],
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        peek: bool = False,
        metrics: Callable[[], bytes] | None = None,
    ) -> None:
        # the caller's list, not a copy: ``journaled serve`` adds each queue once it owns it
        self.queues, self.token, self.peek, self.metrics = queues, token, peek, metrics
        self.history = History(self.queues)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib's name)
                pass  # a page polled every two seconds must not fill the serve command's output

            def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
                server.answer(self)

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.host, self.port = host, int(self.httpd.server_address[1])
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="journaled-status", daemon=True)
        self.thread.start()

    def url(self) -> str:
        """The page's address, with the token to paste into a browser."""
        query = f"?token={self.token}" if self.token else ""
        return f"http://{self.host}:{self.port}/{query}"

    def _allowed(self, req: BaseHTTPRequestHandler, query: dict[str, list[str]]) -> int:
        """200 if the request carries the token, else 401 (none) or 403 (a wrong one)."""
        if self.token is None:
            return 200
        given = None
        if "token" in query:
            given = query["token"][0]
        elif (auth := req.headers.get("Authorization", "")).startswith("Bearer "):
            given = auth[len("Bearer ") :]
        elif (raw := req.headers.get("Cookie")) is not None:
            jar = cookies.SimpleCookie()
            try:
                jar.load(raw)
            except cookies.CookieError:
                return 403
            if _COOKIE in jar:
                given = jar[_COOKIE].value
        if given is None:
            return 401
        return 200 if hmac.compare_digest(given.encode(), self.token.encode()) else 403

    def answer(self, req: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(req.path)
        query = parse_qs(parts.query)
        code = self._allowed(req, query)
        if code != 200:
            why = (
                "a token is needed: open the address journaled serve printed"
                if code == 401
                else "wrong token"
            )
            self._send(req, code, "text/plain; charset=utf-8", why.encode())
            return
        extra = {}
        if self.token is not None and "token" in query:
            extra["Set-Cookie"] = f"{_COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/"
        if parts.path == "/":
            self._send(req, 200, "text/html; charset=utf-8", _page(), extra)
        elif parts.path == "/api/status":
            body = json.dumps(status(self.queues, self.history, self.peek), default=str).encode()
            self._send(req, 200, "application/json", body, extra)
        elif parts.path == "/metrics" and self.metrics is not None:
            self._send(req, 200, "text/plain; version=0.0.4; charset=utf-8", self.metrics(), extra)
        else:
            self._send(req, 404, "text/plain; charset=utf-8", b"not found")

    @staticmethod
    def _send(
        req: BaseHTTPRequestHandler, code: int, kind: str, body: bytes, extra: dict[str, str] | None = None
    ) -> None:
        req.send_response(code)
        req.send_header("Content-Type", kind)
        req.send_header("Content-Length", str(len(body)))
        req.send_header("Cache-Control", "no-store")
        # the page runs only its own inline script and talks only to this server
        req.send_header(
            "Content-Security-Policy",
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'",
        )
        req.send_header("X-Content-Type-Options", "nosniff")
        for k, v in (extra or {}).items():
            req.send_header(k, v)
        req.end_headers()
        req.wfile.write(body)

    def close(self) -> None:
        self.history.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


__all__ = ["HISTORY_SECONDS", "History", "StatusServer", "status"]
