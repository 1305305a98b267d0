"""The status page of ``journaled serve ... --http HOST:PORT``: a small read-only HTML page and the
JSON it is drawn from, served by cli/httpserver.py (no framework, no build step).

* ``/`` the page: a section per queue served, and per queue its readers' dead-letter and
  ``expire_to`` queues this process owns (:func:`served`): its health, clients, put rate,
  journal size, and per reader the backlog, commit rate, age of the oldest item not yet
  committed, open reads, delayed items and dead letters; the put rate, and per reader the
  backlog beside its commit rate, plotted over the last :data:`HISTORY_SECONDS` with axes,
  time labels and values (the page's own script draws SVG: no external script, it works
  offline); the open reads (reader, id, age, client); the newest dead letters of each reader's
  dead-letter queue, with their reasons; and a search form.
* ``/api/status`` that JSON (the page asks for it every two seconds).
* ``/api/find`` the search: ``journaled dump``'s filters over a served queue's files
  (below: bounded, read from the files, never holding the queue's lock).
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
changes a queue: every route only reads stats, open reads and the queues' files.

**The search** (``/api/find``): ``journaled dump``'s filters (cli/finding.py) over the query
string, answered as JSON.  Query parameters: ``queue`` (a served queue's path; the first served
queue without it), ``key``, ``header=NAME=VALUE`` (repeatable: all must match),
``since``/``until`` (ISO 8601, naive meaning UTC, or seconds since the epoch), ``start``/``end``
(an id range, both inclusive) and ``limit`` (at most :data:`FIND_ITEMS`).  Each item found is
given by id, time (``at``, seconds since the epoch), key, headers and payload size; its payload
(the first :data:`PEEK_BYTES`, as text) only when the page was started with ``--peek``.  Keys
and header values are shown as ``journaled dump`` shows them (printable ASCII as itself, every
other byte ``\\xNN``).

**Read only, and never in the owner's way.**  The records are read from the journal files by
:class:`~journaled.offline.scan.JournalScanner` as any reader of a live directory does: no queue
lock, no reader, nothing written, so a put or a commit never waits for a search (the files hold
what the owner has written so far; items still buffered by the sync policy show on the next
search).  A ``since`` starts the scan at the first id put at or after it (the time index:
bisection over record times), and the scan stops at the first record past ``end`` or ``until``.

**Bounded.**  At most :data:`FIND_ITEMS` items and about :data:`FIND_BYTES` bytes of them per
answer, and at most :data:`FIND_SECONDS` of scanning (a key or header filter reads every
record in the range): the answer then says ``more`` and the id to search on from (``next_id``).
One search runs at a time per page (another is answered 503), so a search never takes both of
the page's workers; and it rests between batches of records as long as it worked (at most
:data:`FIND_REST`), so it takes at most about half of the owner's interpreter lock.
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from http import cookies
from importlib import resources
from typing import Any

import attrs

from journaled.cli.finding import Filter, parse_header, parse_time
from journaled.cli.httpserver import BoundedHTTPServer, Request, Response, host_allowed
from journaled.cli.inspection import escape, show_bytes
from journaled.cli.scrapes import SharedRender, dumps_in_turns, stats_dict
from journaled.format.record import Put, PutX
from journaled.offline.scan import JournalScanner
from journaled.queue import JournaledQueue

#: how far back the page's plots reach, and how often a sample is taken for them
HISTORY_SECONDS = 600
SAMPLE_EVERY = 2.0
#: at most this many dead letters listed per dead-letter queue, and payload bytes shown per item
DEAD_LETTERS_SHOWN = 20
PEEK_BYTES = 200
#: sessions remembered at once (each a browser that opened the page with the token)
MAX_SESSIONS = 64
#: at most this many open reads listed per queue (the oldest items first)
OPEN_READS_SHOWN = 100


#: items in one answer at most (and the default ``limit``)
FIND_ITEMS = 100
#: bytes of items (their JSON) in one answer, about: the item that passes it is the last
FIND_BYTES = 256 * 1024
#: seconds one search may scan before it answers with what it found so far (the clock is read
#: every FIND_CHECK_EVERY records)
FIND_SECONDS = 2.0
FIND_CHECK_EVERY = 256
#: at most this many seconds of rest after each batch of FIND_CHECK_EVERY records: as long as
#: the batch took, so a search takes at most about half of the owner's interpreter lock
FIND_REST = 0.05


class SearchError(ValueError):
    """A query the search cannot run: the page shows the message (the answer is 400)."""


def _one(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name, [])
    if len(values) > 1:
        raise SearchError(f"{name} given {len(values)} times")
    return values[0].strip() if values and values[0].strip() else None


def _id(query: dict[str, list[str]], name: str) -> int | None:
    text = _one(query, name)
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()):
        raise SearchError(f"{name}: not an item id: {text!r}")
    return int(text)


def parse_find(query: dict[str, list[str]]) -> tuple[Filter, int]:
    """The :class:`~journaled.cli.finding.Filter` and the item limit a query string asks for;
    :class:`SearchError` for a wrong one."""
    try:
        since, until = _one(query, "since"), _one(query, "until")
        headers = tuple(parse_header(h) for h in query.get("header", []) if h.strip())
        wanted = Filter(
            start_id=_id(query, "start") or 0,
            end_id=_id(query, "end"),
            since_ms=None if since is None else parse_time(since),
            until_ms=None if until is None else parse_time(until),
            key=None if (key := _one(query, "key")) is None else key.encode("utf-8", "surrogateescape"),
            headers=headers,
        )
    except argparse.ArgumentTypeError as exc:
        raise SearchError(str(exc)) from None
    text = _one(query, "limit")
    if text is not None and not (text.isascii() and text.isdigit()):
        raise SearchError(f"limit: a whole number between 1 and {FIND_ITEMS}, not {text!r}")
    limit = _id(query, "limit")
    if limit is None:
        limit = FIND_ITEMS
    if not 1 <= limit <= FIND_ITEMS:
        raise SearchError(f"limit: between 1 and {FIND_ITEMS}, not {limit}")
    return wanted, limit


def found_json(rec: Put, peek: bool) -> dict[str, Any]:
    """What the page shows of one record found."""
    meta = rec.meta if isinstance(rec, PutX) else None
    row: dict[str, Any] = {
        "id": rec.id,
        "at": rec.add_ms / 1000,
        "size": len(rec.payload),
        "key": None if meta is None or meta.key is None else show_bytes(meta.key),
        "headers": {} if meta is None else {escape(k): show_bytes(v) for k, v in meta.headers.items()},
    }
    if peek:
        row["payload"] = escape(rec.payload[:PEEK_BYTES].decode("utf-8", "backslashreplace"))
        row["payload_cut"] = len(rec.payload) > PEEK_BYTES
    return row


def find(path: str, name: str, wanted: Filter, limit: int, peek: bool) -> dict[str, Any]:
    """``/api/find``: run ``wanted`` over the journal files of queue ``name`` in ``path``:
    ``items`` found, ``scanned`` (records read in the range), ``more`` (the answer stopped at a
    bound; ``next_id`` is where to go on from) and ``damage`` (spans skipped)."""
    scanner = JournalScanner(path, name)
    first, last = wanted.id_range(path, name)
    deadline = time.monotonic() + FIND_SECONDS
    items: list[dict[str, Any]] = []
    size = scanned = 0
    more, next_id = False, None
    batch = time.monotonic()
    for rec in scanner.records(first, last):
        if wanted.past(rec):
            break  # ids and add times only grow along the journal: nothing later matches
        late = False
        if scanned and scanned % FIND_CHECK_EVERY == 0:  # never before the first: every answer gets on
            now = time.monotonic()
            late = now > deadline
            # the scan runs in the owner's process and shares its interpreter lock: it rests as
            # long as it worked, so the owner's puts and commits keep at least half of it
            time.sleep(0 if late else min(now - batch, FIND_REST))
            batch = time.monotonic()
        if len(items) >= limit or size >= FIND_BYTES or late:
            more, next_id = True, rec.id
            break
        scanned += 1
        if not wanted.matches(rec):
            continue
        row = found_json(rec, peek)
        size += len(str(row))
        items.append(row)
    return {
        "path": path,
        "queue": name,
        "first_id": first,
        "items": items,
        "scanned": scanned,
        "more": more,
        "next_id": next_id,
        "damage": len(scanner.damage),
        "peek": peek,
    }


def _page() -> bytes:
    """The page (journaled/cli/status.html: no template, it draws itself from ``/api/status``)."""
    return resources.files("journaled.cli").joinpath("status.html").read_bytes()


def served(queues: Sequence[Any]) -> list[Any]:
    """``queues`` and, after each, the queues its readers write dead letters and expired items
    to (``ReaderConfig.dead_letter`` / ``expire_to``, followed transitively) that are open in
    this process: every queue the process serves, each once (by path), closed ones left out."""
    out: list[Any] = []
    seen: set[str] = set()
    todo = list(reversed(queues))
    while todo:
        q = todo.pop()
        if q.path in seen or getattr(q, "closed", False):
            continue
        seen.add(q.path)
        out.append(q)
        try:
            found = [d for d in q.destinations() if isinstance(d, JournaledQueue)]
        except Exception:  # closing meanwhile: its section says so, its destinations wait
            found = []
        todo.extend(reversed(found))
    return out


def rates(history: list[dict[str, Any]], path: str) -> dict[str, Any]:
    """Puts per second of the queue at ``path`` and commits per second of each of its readers,
    between the two newest samples of ``history`` that have it (None: fewer than two)."""
    pts = [p for p in history if path in p["queues"]]
    if len(pts) < 2 or pts[-1]["t"] <= pts[-2]["t"]:
        return {"put_per_s": None, "commit_per_s": {}}
    a, b = pts[-2], pts[-1]
    dt = b["t"] - a["t"]
    qa, qb = a["queues"][path], b["queues"][path]
    commits = {
        name: max(0, vb[1] - qa["readers"][name][1]) / dt
        for name, vb in qb["readers"].items()
        if name in qa["readers"]
    }
    return {"put_per_s": max(0, qb["next_id"] - qa["next_id"]) / dt, "commit_per_s": commits}


class History:
    """Samples of every served queue's figures (:func:`served`), the newest
    :data:`HISTORY_SECONDS` of them, taken by a daemon thread every :data:`SAMPLE_EVERY` seconds
    (``lock`` guards ``samples``): per queue its next id, per reader its backlog and commits."""

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
        for q in served(self.queues):
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


def _open_reads(q: Any) -> list[dict[str, Any]]:
    try:
        return [attrs.asdict(r) for r in q.open_reads(OPEN_READS_SHOWN)]
    except Exception:  # closing meanwhile, or not an owner
        return []


def status(queues: Sequence[Any], history: History, peek: bool) -> dict[str, Any]:
    """What ``/api/status`` answers: for every served queue (:func:`served`) its stats, rates,
    open reads (the oldest :data:`OPEN_READS_SHOWN`) and dead letters; and the history."""
    out = []
    samples = history.copy()
    for q in served(queues):
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
        out.append(
            {
                "path": q.path,
                "stats": stats_dict(st),
                "rates": rates(samples, q.path),
                "open_reads": _open_reads(q),
                "dead_letters": dead,
            }
        )
    return {"now": time.time(), "queues": out, "history": samples, "peek": peek}


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
        #: one search at a time: the page's other worker keeps answering
        self._searching = threading.Lock()
        #: ``/api/status``'s answers: scrapes share renders, and render in turns (docs/design.md,
        #: "The cost of a scrape")
        self.status_render = SharedRender(
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
            return Response(200, self.status_render.get(), "application/json", tuple(extra))
        if req.path == "/api/find":
            return self._find(req, tuple(extra))
        if req.path == "/metrics" and self.metrics is not None:
            return Response(200, self.metrics(), "text/plain; version=0.0.4; charset=utf-8", tuple(extra))
        return Response(404, b"not found", headers=tuple(extra))

    def _find(self, req: Request, extra: tuple[tuple[str, str], ...]) -> Response:
        """``/api/find`` (:func:`find`): 400 for a wrong query, 404 for a queue not
        served, 503 while another search runs."""

        def answer(code: int, body: dict[str, Any]) -> Response:
            return Response(code, json.dumps(body).encode(), "application/json", extra)

        try:
            wanted, limit = parse_find(req.query)
        except SearchError as exc:
            return answer(400, {"error": str(exc)})
        queues = served(self.queues)
        path = req.query.get("queue", [queues[0].path if queues else ""])[0]
        q = next((q for q in queues if q.path == path), None)
        if q is None:
            return answer(404, {"error": f"no queue served at {path!r}"})
        if not self._searching.acquire(blocking=False):
            return answer(503, {"error": "another search is running: try again when it has answered"})
        try:
            return answer(200, find(q.path, q.name, wanted, limit, self.peek))
        except Exception as exc:  # the files changed under the scan, a newer format: say so
            return answer(500, {"error": f"the search failed: {exc}"})
        finally:
            self._searching.release()

    def close(self) -> None:
        """Stop serving."""
        self.history.stop.set()
        self.httpd.close()


__all__ = [
    "FIND_BYTES",
    "FIND_CHECK_EVERY",
    "FIND_ITEMS",
    "FIND_REST",
    "FIND_SECONDS",
    "HISTORY_SECONDS",
    "History",
    "SearchError",
    "StatusServer",
    "find",
    "parse_find",
    "rates",
    "served",
    "status",
]
