"""``journaled serve PATH...``: a dedicated owner that holds queues open for other processes.

Every process's ``JournaledQueue(path)`` already serves the others while it owns the directory
(remote/server.py); a service that prefers an owner that never exits runs this instead.  It waits until
it owns each directory (another owner may be leaving), prints ``serving PATH (pid N)`` for each,
and holds them until SIGINT or SIGTERM, then closes them cleanly: the remaining processes take
over as after any owner's close.

Each PATH must be a queue or an empty directory (a new queue, named after it): a missing path or
a directory holding other things is refused before anything is opened (one line, exit 2), unless
``--create`` asks for a new queue there, so a mistyped path is never turned into a queue.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from typing import Any

from journaled.cli.inspection import UsageError
from journaled.config import QueueConfig
from journaled.errors import QueueLocked
from journaled.offline.snapshot import queues_in
from journaled.queue import JournaledQueue

#: seconds between attempts to own a directory another process holds
RETRY = 0.1


def own(path: str, config: QueueConfig, stop: threading.Event) -> JournaledQueue | None:
    """Open ``path`` as its owner, waiting while another process owns it (``None`` if stopped)."""
    while not stop.is_set():
        try:
            q = JournaledQueue(path, config)
        except QueueLocked:  # held, and not serving (a repair): wait for it
            stop.wait(RETRY)
            continue
        if q.is_owner:
            return q
        q.close()  # a client: someone else owns it now
        stop.wait(RETRY)
    return None


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


def cmd_serve(args: argparse.Namespace) -> int:
    for path in args.paths:  # all of them, before owning any
        check_path(path, args.create)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    config = QueueConfig(sync=args.sync)
    queues: list[JournaledQueue] = []
    try:
        for path in args.paths:
            q = own(path, config, stop)
            if q is None:
                break
            queues.append(q)
            print(f"serving {q.path} (pid {os.getpid()})", flush=True)
        while not stop.wait(1.0):
            pass
    finally:
        for q in queues:
            q.close()
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
    p.set_defaults(func=cmd_serve)
