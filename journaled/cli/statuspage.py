"""The status page of ``journaled serve ... --http HOST:PORT``: a small read-only HTML page and the
JSON it is drawn from, served by cli/httpserver.py (no framework, no build step).

* ``/`` the page: per queue its health, clients, put rate, journal size, and per reader the
  backlog, commit rate, oldest age, open reads, delayed items and dead letters, with the backlog
  and rates plotted over the last :data:`HISTORY_SECONDS` (the page's own script draws SVG);
  the newest dead letters of each reader's dead-letter queue, with their reasons.
* ``/api/status`` that JSON (the page asks for it every two seconds).
* ``/metrics`` the Prometheus exposition, when a ``metrics`` function is given.

**Access.**  Bound to 127.0.0.1 unless told otherwise.  Any local user can connect to a local
port, so every request needs the token printed at start (as Jupyter does): ``?token=...`` on the
first visit, which sets a cookie for the rest; or an ``Authorization: Bearer ...`` header for a
scraper.  The cookie holds a random session value, never the token (a browser sends a host's
cookies to all its ports, so to every other server on it), under a name that carries the port
(two pages on one host keep apart), ``HttpOnly`` and ``SameSite=Strict``.  Without a token the
answer is 401, with a wrong one (or an unknown session) 403.  ``token=None`` (``--no-token``)
opts out of the token, never of the ``Host`` check: a request whose ``Host`` is not the bound
address or a loopback name (or one of ``allowed_hosts``) is refused, so a web site cannot read
the page through DNS rebinding.  Payloads are never shown unless
``peek`` (``--peek``), and then escaped, at most :data:`PEEK_BYTES` of each.  Nothing here
changes a queue: every route only reads stats and the dead-letter queues' files.
"""

from __future__ import annotations

import hmac
import os
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from http import cookies
from importlib import resources
from typing import Any

from journaled.cli.httpserver import BoundedHTTPServer, Request, Response, host_allowed
from journaled.cli.inspection import escape
from journaled.cli.scrapes import SharedRender, dumps_in_turns, stats_dict

#: how far back the page's plots reach, and how often a sample is taken for them
HISTORY_SECONDS = 600
SAMPLE_EVERY = 2.0
#: at most this many dead letters listed per dead-letter queue, and payload bytes shown per item
DEAD_LETTERS_SHOWN = 20
PEEK_BYTES = 200
#: sessions remembered at once (each a browser that opened the page with the token)
MAX_SESSIONS = 64


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
        out.append({"path": q.path, "stats": stats_dict(st), "dead_letters": dead})
    return {"now": time.time(), "queues": out, "history": history.copy(), "peek": peek}


class StatusServer:
    """The page's HTTP server on ``(host, port)`` (0: any free port; :attr:`port` says which),
    serving until :meth:`close` (cli/httpserver.py: bounded connections, deadlines and sizes).

    ``allowed_hosts`` names the hosts a request's ``Host`` may carry besides the bound address
    and the loopback names."""

    def __init__(
        self,
        queues: Sequence[Any],
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        peek: bool = False,
        metrics: Callable[[], bytes] | None = None,
        allowed_hosts: Sequence[str] = (),
    ) -> None:
        # the caller's list, not a copy: ``journaled serve`` adds each queue once it owns it
        self.queues, self.token, self.peek, self.metrics = queues, token, peek, metrics
        self.allowed_hosts = frozenset(h.lower().strip("[]").rstrip(".") for h in allowed_hosts)
        #: the session values handed out for the token, newest last (a browser's cookie carries
        #: one of them, never the token: cookies are sent to every port of a host)
        self.sessions: dict[str, None] = {}
        self._sessions_lock = threading.Lock()
        # scrapes share renders, and render in turns (docs/design.md, "The cost of a scrape")
        self._status = SharedRender(
            lambda: dumps_in_turns(status(self.queues, self.history, self.peek), default=str).encode()
        )
        self.httpd = BoundedHTTPServer(host, port, self.answer, "status")
        self.history = History(self.queues)
        self.host, self.port = host, self.httpd.port
        #: the cookie's name carries the port: two pages on one host keep their own sessions
        self.cookie = f"journaled_session_{self.port}"

    def url(self) -> str:
        """The page's address, with the token to paste into a browser."""
        query = f"?token={self.token}" if self.token else ""
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{shown}:{self.port}/{query}"

    def _allowed(self, req: Request) -> int:
        """200 if the request carries the token (or a session it opened), else 401 (none) or
        403 (a wrong one)."""
        if self.token is None:
            return 200
        given = None
        if "token" in req.query:
            given = req.query["token"][0]
        elif (auth := req.headers.get("authorization", "")).startswith("Bearer "):
            given = auth[len("Bearer ") :]
        elif (raw := req.headers.get("cookie")) is not None:
            jar = cookies.SimpleCookie()
            try:
                jar.load(raw)
            except cookies.CookieError:
                return 403
            if self.cookie in jar:
                with self._sessions_lock:
                    return 200 if jar[self.cookie].value in self.sessions else 403
        if given is None:
            return 401
        return 200 if hmac.compare_digest(given.encode(), self.token.encode()) else 403

    def _new_session(self) -> str:
        value = secrets.token_urlsafe(32)
        with self._sessions_lock:
            self.sessions[value] = None
            while len(self.sessions) > MAX_SESSIONS:  # the oldest browser logs in again
                del self.sessions[next(iter(self.sessions))]
        return value

    def answer(self, req: Request) -> Response:
        """The answer to one request (called by the server's worker threads)."""
        if not host_allowed(req, self.host, self.allowed_hosts):
            why = (
                f"this page is not served as {req.headers.get('host', '')!r} (serve --allow-host names more)"
            )
            return Response(403, why.encode())
        code = self._allowed(req)
        if code != 200:
            why = (
                "a token is needed: open the address journaled serve printed"
                if code == 401
                else "wrong token"
            )
            return Response(code, why.encode())
        extra: list[tuple[str, str]] = [
            ("Cache-Control", "no-store"),
            # the page runs only its own inline script and talks only to this server
            (
                "Content-Security-Policy",
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                "connect-src 'self'",
            ),
            ("X-Content-Type-Options", "nosniff"),
        ]
        if self.token is not None and "token" in req.query:
            extra.append(
                ("Set-Cookie", f"{self.cookie}={self._new_session()}; HttpOnly; SameSite=Strict; Path=/")
            )
        if req.path == "/":
            return Response(200, _page(), "text/html; charset=utf-8", tuple(extra))
        if req.path == "/api/status":
            return Response(200, self._status.get(), "application/json", tuple(extra))
        if req.path == "/metrics" and self.metrics is not None:
            return Response(200, self.metrics(), "text/plain; version=0.0.4; charset=utf-8", tuple(extra))
        return Response(404, b"not found", headers=tuple(extra))

    def close(self) -> None:
        """Stop serving."""
        self.history.stop.set()
        self.httpd.close()


__all__ = ["HISTORY_SECONDS", "History", "StatusServer", "status"]
