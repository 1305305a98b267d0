"""``journaled serve PATH...``: a dedicated owner that holds queues open for other processes.

Every process's ``JournaledQueue(path)`` already serves the others while it owns the directory
(remote/server.py); a service that prefers an owner that never exits runs this instead.  It waits until
it owns each directory (another owner may be leaving), prints ``serving PATH (pid N)`` for each,
and holds them until SIGINT or SIGTERM, then closes them cleanly: the remaining processes take
over as after any owner's close.

Each PATH must be a queue or an empty directory (a new queue, named after it): a missing path or
a directory holding other things is refused before anything is opened (one line, exit 2), unless
``--create`` asks for a new queue there, so a mistyped path is never turned into a queue.  Two
paths of one queue name (or one path twice) are refused the same way.  A PATH that a queue
served before it already opened in this process (a reader's dead-letter or ``expire_to``
queue) is served through that instance, which stays that queue's.

``--metrics HOST:PORT`` (the ``journaled[metrics]`` extra) also serves Prometheus metrics of the
queues it owns, and of this process, at ``http://HOST:PORT/metrics`` (journaled/metrics.py,
docs/metrics.md).  It listens before any queue is opened, so an address in use is refused with
nothing owned (one line, exit 2), and prints ``metrics at URL`` first, with the port the system
chose for port 0.

``--http [HOST:]PORT`` serves the status page (journaled/cli/statuspage.py): 127.0.0.1 unless a
host is given, a token on every request (printed with the address; ``--no-token`` opts out),
payloads (dead letters', items its search finds) only with ``--peek``, a request naming another
``Host`` refused (DNS rebinding; ``--allow-host NAME`` names more).  Like ``--metrics`` it
listens before any queue is opened, and an address in use is one line and exit 2.  Both ports
are served by cli/httpserver.py, bounded so that nothing reaching them can take the owner's
resources (docs/design.md, "What listens on a port").
"""

from __future__ import annotations

import argparse
import os
import secrets
import select
import signal
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from journaled.cli.inspection import UsageError
from journaled.config import QueueConfig, validate_name
from journaled.errors import InvalidName, QueueLocked
from journaled.offline.snapshot import queues_in
from journaled.queue import JournaledQueue

if TYPE_CHECKING:
    from journaled.cli.httpserver import BoundedHTTPServer
    from journaled.cli.statuspage import StatusServer
    from journaled.metrics import QueueCollector

#: seconds between attempts to own a directory another process holds
RETRY = 0.1


class StopSignals:
    """SIGINT and SIGTERM as a flag the main thread waits on, set by a handler that takes no lock.

    A handler runs in the main thread between two of its bytecodes, and may run while that thread
    holds a lock: ``threading.Event.set`` from a handler waits for ever on the lock of the
    ``Event.wait`` it interrupted.  (``journaled serve`` hung so, now and then, on a SIGTERM that
    came right after its "serving" line; CI killed it after 60 s.)  Here the handler only sets
    :attr:`requested`, and :meth:`wait` sleeps in ``select`` on the read end of a pipe that
    :func:`signal.set_wakeup_fd` writes a byte to when a signal arrives, so a signal ends the wait
    at once, with no polling.  Main thread only; :meth:`close` puts the old handlers back."""

    def __init__(self) -> None:
        self.requested = False
        self._r, self._w = os.pipe()
        for fd in (self._r, self._w):
            os.set_blocking(fd, False)
        self._old_fd = signal.set_wakeup_fd(self._w)
        self._old = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}

    def _handle(self, signum: int, frame: object) -> None:
        self.requested = True  # nothing else: no lock, no allocation that could wait

    def is_set(self) -> bool:
        """A stop signal came."""
        return self.requested

    def wait(self, timeout: float) -> bool:
        """Sleep until a stop signal comes or ``timeout`` seconds pass; whether one came."""
        if not self.requested:
            select.select([self._r], [], [], timeout)
            try:
                while os.read(self._r, 64):  # drained: the next wait sleeps again
                    pass
            except BlockingIOError:
                pass
        return self.requested

    def close(self) -> None:
        """Put back the handlers and the wakeup descriptor found, and close the pipe."""
        for signum, old in self._old.items():
            signal.signal(signum, old)
        signal.set_wakeup_fd(self._old_fd)
        os.close(self._r)
        os.close(self._w)


def own(
    path: str, config: QueueConfig, stop: StopSignals | threading.Event, served: Sequence[JournaledQueue] = ()
) -> JournaledQueue | None:
    """Open ``path`` as its owner, waiting while another process owns it (``None`` if stopped).

    A queue this process owns already is one a served queue opened as a reader's destination
    (a dead-letter or ``expire_to`` queue): that instance is returned, and it stays the served
    queue's (closed with it).  Such a queue reached through none of ``served`` is a
    :class:`UsageError`: waiting for a lock this process holds would never end."""
    while not stop.is_set():
        try:
            q = JournaledQueue(path, config)
        except QueueLocked as exc:
            if exc.pid == os.getpid():
                found = owned_here(path, served)
                if found is None:
                    raise UsageError(
                        f"{path}: this process owns it already, through none of the queues it serves"
                    ) from None
                return found
            stop.wait(RETRY)  # held, and not serving (a repair): wait for it
            continue
        if q.is_owner:
            return q
        q.close()  # a client: someone else owns it now
        stop.wait(RETRY)
    return None


def owned_here(path: str, served: Sequence[JournaledQueue]) -> JournaledQueue | None:
    """The open queue at ``path`` among ``served`` and the destinations their readers write to
    (dead letters, expired items: ``ReaderConfig.dead_letter`` / ``expire_to``), followed
    transitively; ``None`` if none is."""
    want = os.path.abspath(path)
    todo, seen = list(served), set()
    while todo:
        q = todo.pop()
        if id(q) in seen or q.closed:
            continue
        seen.add(id(q))
        if q.path == want:
            return q
        for name in q.readers():
            config = q.reader(name).config
            todo.extend(s for s in (config.dead_letter, config.expire_to) if isinstance(s, JournaledQueue))
    return None


def served_name(path: str) -> str:
    """The name the queue at ``path`` has (or will have: a new queue is named after its
    directory), as ``JournaledQueue(path)`` finds it."""
    if os.path.isdir(path):
        names = queues_in(path)
        if names:
            return names[0]
    try:
        return validate_name(os.path.basename(os.path.abspath(path)), "queue name")
    except InvalidName:
        return "queue"


def check_path(path: str, create: bool) -> None:
    """Refuse (:class:`UsageError`: one line, exit 2) a path ``serve`` must not turn into a
    queue: one that is missing or a directory that holds something else, unless ``create``
    (then a missing directory is created and a queue is made beside what it holds); a path that
    is not a directory, or a directory of several queues, always.  An existing queue and an
    empty directory are served as they are."""
    if not os.path.lexists(path):
        if not create:
            raise UsageError(f"{path}: does not exist (to make a new queue there: --create)")
        return
    if not os.path.isdir(path):
        raise UsageError(f"{path}: not a directory")
    names = queues_in(path)
    if len(names) > 1:
        raise UsageError(f"{path}: holds several queues ({', '.join(names)}); serve one queue per directory")
    if not names and os.listdir(path) and not create:
        raise UsageError(
            f"{path}: holds no journaled queue and is not empty (to make a queue in it: --create)"
        )


def _sync(text: str) -> str | float:
    if text in ("always", "never"):
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a sync policy: {text!r}") from None


def _address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for an IPv6 address; ``:PORT``: every IPv4 interface)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"not HOST:PORT: {text!r}")
    return host.removeprefix("[").removesuffix("]") or "0.0.0.0", int(port)


def start_metrics(host: str, port: int) -> tuple[BoundedHTTPServer, QueueCollector, str]:
    """Listen for Prometheus scrapes at ``host:port`` (cli/httpserver.py, threads of its own:
    bounded like the status page); the server, the collector to add queues to, and the URL (with
    the port chosen for port 0).  An address that cannot be listened on, or prometheus_client
    missing, is a :class:`UsageError`."""
    try:
        from prometheus_client import CollectorRegistry, ProcessCollector
        from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

        from journaled.metrics import QueueCollector
    except ImportError:
        raise UsageError("--metrics needs prometheus_client: pip install 'journaled[metrics]'") from None
    from journaled.cli.httpserver import BoundedHTTPServer, Request, Response
    from journaled.cli.scrapes import SharedRender

    process = CollectorRegistry()
    ProcessCollector(registry=process)
    collector = QueueCollector()
    # the same text as generate_latest of one registry holding both, written faster, and shared
    # by the scrapes that come while it is fresh (docs/design.md, "The cost of a scrape")
    shared = SharedRender(lambda: bytes(generate_latest(process)) + collector.exposition())

    def answer(req: Request) -> Response:
        if req.path != "/metrics":
            return Response(404, b"not found: the metrics are at /metrics\n")
        return Response(200, shared.get(), CONTENT_TYPE_LATEST)

    shown = f"[{host}]" if ":" in host else host
    try:
        server = BoundedHTTPServer(host, port, answer, "metrics")
    except OSError as exc:
        raise UsageError(f"--metrics {shown}:{port}: cannot listen there: {exc.strerror or exc}") from None
    return server, collector, f"http://{shown}:{server.port}/metrics"


def _http_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` as for ``--metrics``, but ``:PORT`` (or a bare port) means 127.0.0.1."""
    if text.isdigit():
        text = ":" + text
    host, port = _address(text)
    return ("127.0.0.1" if host == "0.0.0.0" and text.startswith(":") else host), port


def start_status_page(
    host: str,
    port: int,
    queues: list[JournaledQueue],
    token: bool,
    peek: bool,
    allowed_hosts: Sequence[str] = (),
) -> tuple[StatusServer, str]:
    """The status page (cli/statuspage.py) for ``queues`` (filled as they are owned), listening
    before any is opened; with prometheus_client installed it serves ``/metrics`` too."""
    from journaled.cli.scrapes import SharedRender
    from journaled.cli.statuspage import StatusServer

    metrics = None
    try:
        from journaled.metrics import QueueCollector
    except ImportError:
        pass
    else:
        collector = QueueCollector()
        added: set[int] = set()

        def render() -> bytes:
            for q in list(queues):  # queues owned since the last scrape
                if id(q) not in added:
                    added.add(id(q))
                    collector.add(q)
            return collector.exposition()

        metrics = SharedRender(render).get  # scrapes share renders (docs/design.md, "The cost of a scrape")

    secret = secrets.token_urlsafe(24) if token else None
    shown = f"[{host}]" if ":" in host else host
    try:
        page = StatusServer(
            queues, host, port, token=secret, peek=peek, metrics=metrics, allowed_hosts=allowed_hosts
        )
    except OSError as exc:
        raise UsageError(f"--http {shown}:{port}: cannot listen there: {exc.strerror or exc}") from None
    return page, page.url()


def cmd_serve(args: argparse.Namespace) -> int:
    names: dict[str, str] = {}
    for path in args.paths:  # all of them, before owning any
        check_path(path, args.create)
        name = served_name(path)
        if name in names:
            # --metrics and the status page tell queues apart by name, and one path twice would
            # wait for its own lock
            raise UsageError(f"{path}: {names[name]} is served too, and both are queues named {name!r}")
        names[name] = path
    server: BoundedHTTPServer | None = None
    collector: QueueCollector | None = None
    page: StatusServer | None = None
    queues: list[JournaledQueue] = []
    if args.metrics is not None:
        server, collector, url = start_metrics(*args.metrics)
        print(f"metrics at {url}", flush=True)
    if args.http is not None:
        host, port = args.http
        page, url = start_status_page(host, port, queues, not args.no_token, args.peek, args.allow_host)
        print(f"status page at {url}", flush=True)
    stop = StopSignals()
    config = QueueConfig(sync=args.sync)
    try:
        for path in args.paths:
            q = own(path, config, stop, queues)
            if q is None:
                break
            queues.append(q)
            if collector is not None:
                try:
                    collector.add(q)
                except ValueError:  # two names told apart above; a journal that names another
                    raise UsageError(
                        f"{path}: another queue served is named {q.name!r} too, and --metrics tells "
                        "queues apart by name"
                    ) from None
            print(f"serving {q.path} (pid {os.getpid()})", flush=True)
        while not stop.wait(60.0):
            pass
    finally:
        try:
            for q in queues:
                q.close()
            if server is not None:
                server.close()
            if page is not None:
                page.close()
        finally:
            stop.close()  # after the closes: a second signal does not cut them short
    return 0


def add_serve_command(sub: Any) -> None:
    """Register ``serve`` on the ``journaled`` command's subparsers."""
    p = sub.add_parser(
        "serve",
        help="hold queues open for other processes (a dedicated owner)",
        description="Own each queue directory and serve other processes of this user until SIGINT/SIGTERM.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="queue directories")
    p.add_argument(
        "--sync",
        default=0.05,
        type=_sync,
        help='the sync policy: "always", "never" or seconds (default 0.05)',
    )
    p.add_argument(
        "--create",
        action="store_true",
        help="make a new queue where a PATH does not exist or holds no queue yet (without it such "
        "a path is refused: a mistyped path is not turned into a queue)",
    )
    p.add_argument(
        "--metrics",
        type=_address,
        metavar="HOST:PORT",
        help="also serve Prometheus metrics of these queues at http://HOST:PORT/metrics (port 0: "
        "one the system picks; the URL is printed first). Needs the journaled[metrics] extra",
    )
    p.add_argument(
        "--http",
        type=_http_address,
        metavar="[HOST:]PORT",
        help="also serve a read-only status page (and /metrics with the journaled[metrics] extra) at "
        "http://HOST:PORT/ (host 127.0.0.1 unless given; port 0: one the system picks); its address, "
        "with the token every request needs, is printed first",
    )
    p.add_argument(
        "--no-token",
        action="store_true",
        help="serve the status page without a token (any local user can read it)",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="HOST",
        help="a name the status page may be reached by besides its address and localhost (a request "
        "naming any other Host is refused: DNS rebinding); may be given more than once",
    )
    p.add_argument(
        "--peek",
        action="store_true",
        help="show payloads on the status page (dead letters' and search results', escaped)",
    )
    p.set_defaults(func=cmd_serve)
