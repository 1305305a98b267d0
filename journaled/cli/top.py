"""``journaled top PATH...``: a live view of queues, refreshed until ``q`` or Ctrl-C.

Per queue: who owns it, its health, the processes using it, the put rate and the journal's size;
per reader: the backlog (items and bytes), the commit rate, the age of the oldest item not yet
committed, open reads, delayed items and dead letters.  A queue with a live owner is asked over
its socket (one short connection and one ``stats`` request per refresh: cheap and exact; it holds
no read and never takes the queue over); a queue nobody holds is read from its files without
taking it (as ``journaled stat``), which reads the backlog once per refresh, so on a large backlog
those refreshes are spaced out (:data:`SLOW_FACTOR`).  Nothing here ever owns, creates or writes anything.

Sampling (:func:`sample`) and drawing (:func:`render`) are plain functions on values, so the
screen a user sees is tested without a terminal; :func:`run` is the loop: the terminal's
alternate screen and cbreak mode while it runs, restored on ``q``, Ctrl-C or an error.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import shutil
import sys
import termios
import time
import tty
from collections.abc import Iterator, Sequence
from typing import IO, Any

import attrs

from journaled.cli.inspection import UsageError, escape
from journaled.inspection import ask_owner, inspect_queue
from journaled.offline.snapshot import NotAQueue, queue_name

#: a queue read from its files is sampled again only after this many times the last read took
SLOW_FACTOR = 4.0
_ENTER, _LEAVE, _HOME_CLEAR = "\x1b[?1049h\x1b[?25l", "\x1b[?25h\x1b[?1049l", "\x1b[H\x1b[2J"


def _held(delayed: int | None, not_due: int | None) -> int | None:
    """The "delayed" column: items held back, aborted with a delay or not yet due."""
    return None if delayed is None else delayed + (not_due or 0)


def _behind_keys(count: int | None, wait: float | None) -> tuple[str, ...]:
    """The flag for items held back by key order: how many, and the oldest one's wait."""
    if not count:
        return ()
    return (f"{count} behind keys" + ("" if wait is None else f" ({_age(wait).strip()})"),)


@attrs.frozen
class ReaderRow:
    """One reader at one moment (None: not known without a live owner); ``oldest_age``: the
    seconds since the oldest item not yet committed (open reads included) was put."""

    name: str
    backlog: int
    backlog_bytes: int
    oldest_age: float | None
    open_reads: int | None
    delayed: int | None  # held back: aborted with a delay, or put with a not-before still ahead
    dead_lettered: int | None
    committed: int | None
    settled: int  # next_id - backlog: ids this reader is done with, whatever settled them
    flags: tuple[str, ...] = ()


@attrs.frozen
class Sample:
    """One queue at one moment (``at``: ``time.monotonic()``)."""

    at: float
    path: str
    name: str
    source: str  # who answered: "owner pid N", or "files (nobody owns it)", ...
    health: str
    clients: int | None
    next_id: int
    files: int
    nbytes: int
    readers: tuple[ReaderRow, ...]


def sample(path: str, name: str | None = None) -> Sample:
    """The queue in ``path`` now: from its live owner if one answers, else from its files."""
    at = time.monotonic()
    owner = ask_owner(path, name=name)
    if owner is not None and owner.error is None and owner.queue:
        q, health = owner.queue, owner.health
        next_id = int(q["next_id"])
        rows = tuple(
            ReaderRow(
                name=r["name"],
                backlog=r["backlog_items"],
                backlog_bytes=r["backlog_bytes"],
                oldest_age=r.get("oldest_uncommitted_age", r["oldest_age"]),
                open_reads=r["open_reads"],
                delayed=_held(r["items_delayed"], r.get("items_not_due")),
                dead_lettered=r["dead_lettered"],
                committed=r["committed"],
                settled=next_id - r["backlog_items"],
                flags=(("poison",) if r.get("poison") else ())
                + (("no sink",) if r.get("sinks_missing") else ())
                + _behind_keys(r.get("items_behind_keys"), r.get("oldest_key_wait")),
            )
            for r in sorted(owner.readers.values(), key=lambda r: r["name"])
        )
        return Sample(
            at=at,
            path=path,
            name=str(q["name"]),
            source=f"owner pid {owner.pid}",
            health=_health(health),
            clients=len(owner.clients),
            next_id=next_id,
            files=int(q["journal_files"]),
            nbytes=int(q["journal_bytes"]),
            readers=rows,
        )
    snap = inspect_queue(path, name)
    if snap.owner is not None and snap.owner.error is not None:
        source = f"pid {snap.owner.pid}: {snap.owner.error}"
    else:
        source = "files (nobody owns it)"
    rows = tuple(
        ReaderRow(
            name=r.name,
            backlog=r.backlog_items,
            backlog_bytes=r.backlog_bytes,
            oldest_age=r.oldest_age,
            open_reads=r.open_reads,
            delayed=_held(r.items_delayed, r.items_not_due),
            dead_lettered=r.dead_lettered,
            committed=None,
            settled=snap.next_id - r.backlog_items,
            flags=() if r.checkpoint_ok else ("no checkpoint",),
        )
        for r in snap.readers
    )
    return Sample(at, snap.path, snap.name, source, "-", None, snap.next_id, snap.files, snap.bytes, rows)


def _health(health: Any) -> str:
    if health is None:
        return "?"
    if health.ok:
        return "ok"
    why = [
        w
        for w, on in (
            (f"poisoned: {health.poisoned}", bool(health.poisoned)),
            ("directory gone", health.directory_gone),
            (f"failing: {', '.join(health.failing)}", bool(health.failing)),
            (f"poison readers: {', '.join(health.poison_readers)}", bool(health.poison_readers)),
            (
                f"readers without their sink: {', '.join(health.sinkless_readers)}",
                bool(health.sinkless_readers),
            ),
            (
                f"readers stopped at a newer record: {', '.join(health.stopped_readers)}",
                bool(health.stopped_readers),
            ),
        )
        if on
    ]
    return "NOT OK: " + ("; ".join(why) or "see journaled stat")


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    raise AssertionError("unreachable")


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def _opt(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _rate(now: float, before: float, dt: float) -> str:
    return f"{max(0.0, now - before) / dt:,.1f}" if dt > 0 else "-"


def render(samples: Sequence[Sample], previous: dict[str, Sample], interval: float, width: int) -> list[str]:
    """The screen's lines for ``samples``, with rates against ``previous`` (by path)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    lines = [f"journaled top   {stamp}   every {interval:g}s   q or Ctrl-C quits"]
    for s in samples:
        before = previous.get(s.path)
        dt = s.at - before.at if before is not None else 0.0
        put = _rate(s.next_id, before.next_id, dt) if before is not None else "-"
        clients = "-" if s.clients is None else str(s.clients)
        lines += [
            "",
            f"QUEUE {escape(s.name)}  {escape(s.path)}",
            f"  {s.source}   health {s.health}   clients {clients}",
            f"  next id {s.next_id:,}   put/s {put}   journal {s.files} files, {_size(s.nbytes)}",
            f"  {'READER':<16} {'BACKLOG':>10} {'BYTES':>10} {'COMMIT/S':>10} {'UNCOMMITTED':>11} "
            f"{'OPEN':>6} {'DELAYED':>8} {'DEAD':>6}  FLAGS",
        ]
        if not s.readers:
            lines.append("  (no readers)")
        old = {r.name: r for r in before.readers} if before is not None else {}
        for r in s.readers:
            prev = old.get(r.name)
            if prev is None:
                rate = "-"
            elif r.committed is not None and prev.committed is not None:
                rate = _rate(r.committed, prev.committed, dt)
            else:
                rate = _rate(r.settled, prev.settled, dt)
            lines.append(
                f"  {escape(r.name)[:16]:<16} {r.backlog:>10,} {_size(r.backlog_bytes):>10} {rate:>10} "
                f"{_age(r.oldest_age):>11} {_opt(r.open_reads):>6} {_opt(r.delayed):>8} "
                f"{_opt(r.dead_lettered):>6}  {', '.join(r.flags)}"
            )
    return [line[:width].rstrip() for line in lines]


@contextlib.contextmanager
def _screen(out: IO[str], keys: IO[str] | None) -> Iterator[None]:
    """The alternate screen and cbreak keys for the loop's lifetime, restored however it ends."""
    saved = None
    if keys is not None:
        saved = termios.tcgetattr(keys.fileno())
        tty.setcbreak(keys.fileno())
    out.write(_ENTER)
    out.flush()
    try:
        yield
    finally:
        out.write(_LEAVE)
        out.flush()
        if keys is not None and saved is not None:
            termios.tcsetattr(keys.fileno(), termios.TCSADRAIN, saved)


def _wait_for_quit(keys: IO[str] | None, seconds: float) -> bool:
    """Wait up to ``seconds``; True if ``q`` was pressed meanwhile."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if keys is None:
            time.sleep(left)
            return False
        ready, _, _ = select.select([keys], [], [], left)
        if ready:
            key = os.read(keys.fileno(), 32)
            if not key or b"q" in key.lower():
                return True
    return False


def run(paths: Sequence[str], names: Sequence[str | None], interval: float, once: bool, out: IO[str]) -> int:
    """Draw until ``q`` or Ctrl-C; with ``once``, or when ``out`` is not a terminal, print one
    frame (sampled twice, ``interval`` apart, for its rates) and return."""
    previous: dict[str, Sample] = {}
    due: dict[str, float] = {}
    cached: dict[str, Sample] = {}

    def frame() -> list[str]:
        now = time.monotonic()
        samples = []
        for path, name in zip(paths, names, strict=True):
            if path not in cached or now >= due.get(path, 0.0):
                took = time.monotonic()
                fresh = sample(path, name)
                took = time.monotonic() - took
                if path in cached:
                    previous[path] = cached[path]
                cached[path] = fresh
                slow = fresh.source.startswith("files") and took * SLOW_FACTOR > interval
                due[path] = now + (took * SLOW_FACTOR if slow else 0.0)
            samples.append(cached[path])
        width = shutil.get_terminal_size((120, 40)).columns
        return render(samples, previous, interval, width)

    live = out.isatty() and not once
    if not live:  # two samples an interval apart, so the one frame printed has its rates
        frame()
        time.sleep(interval)
        out.write("\n".join(frame()) + "\n")
        out.flush()
        return 0
    keys = sys.stdin if sys.stdin.isatty() else None
    try:
        with _screen(out, keys):
            while True:
                lines = frame()
                out.write(_HOME_CLEAR + "\r\n".join(lines) + "\r\n")
                out.flush()
                if _wait_for_quit(keys, interval):
                    return 0
    except KeyboardInterrupt:
        return 0


def cmd_top(args: argparse.Namespace) -> int:
    if not args.interval > 0:
        raise UsageError(f"--interval must be a positive number of seconds, not {args.interval}")
    paths, names = [], []
    for given in args.paths:
        path = os.path.abspath(given)
        try:
            names.append(queue_name(path, args.name))
        except NotAQueue as exc:
            raise UsageError(f"{exc.path}: {exc.reason}") from None
        paths.append(path)
    return run(paths, names, args.interval, args.once, sys.stdout)


# What `journaled top --help` tells a user (the module docstring above is for developers).
TOP_HELP = """\
A live view of one or more queues, refreshed every --interval seconds; press q (or Ctrl-C) to
quit.  --once prints a single frame, for a script or a log.

Per queue: who owns it, its health, the processes using it, the put rate and the journal's size.
Per reader: the backlog (items and bytes), the commit rate, the age of the oldest item not yet
committed, open reads, delayed items and dead letters.

It never opens, creates or changes a queue: a queue with a running owner is asked for its
figures; one that nobody holds is read from its files, like `journaled stat` (a large backlog
is then read less often).  Every figure: docs/cli.md."""


def add_top_command(sub: Any) -> None:
    p = sub.add_parser(
        "top",
        help="a live view of queues: backlog, rates, oldest uncommitted age, open reads, health (q quits)",
        description=TOP_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="queue directories")
    p.add_argument("--name", help="the queue's name, when a directory holds several")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes (default 1)")
    p.add_argument(
        "--once",
        action="store_true",
        help="print one frame (after one interval) and exit, as when not a terminal",
    )
    p.set_defaults(func=cmd_top)
