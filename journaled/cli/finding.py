"""Finding items: what ``journaled dump``'s filters select, and where its scan starts and stops.

``--key K``, ``--header NAME=VALUE`` (repeatable: all must match), ``--since``/``--until`` (a time:
ISO 8601, naive meaning UTC as ``dump`` prints times, or seconds since the epoch) and an id range
(``--start``, ``--end``, both inclusive).  A journal is in id order and its add times never
decrease along it (docs/format.md, 4.2), so the scan starts at the first id added at or after
``--since`` (found by bisection over record times, the files' first ids narrowing it) and stops
at the first record past ``--end`` or ``--until``: files wholly outside the range are never read
through.  Key and header filters read every record in the range (there is no key index).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import math

import attrs

from journaled.format.record import Put, PutX
from journaled.offline.segments import QueueView


def parse_time(text: str) -> int:
    """A time given on the command line, as ms since the epoch: seconds since the epoch, or ISO
    8601 (``2026-11-28T05:00``, ``2026-11-28 05:00:00+01:00``; without an offset: UTC)."""
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = _dt.datetime.fromisoformat(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"not a time (ISO 8601, or seconds since the epoch): {text!r}"
            ) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=_dt.timezone.utc)
        seconds = when.timestamp()
    if not math.isfinite(seconds) or not 0 <= seconds < 2**53 / 1000:
        raise argparse.ArgumentTypeError(f"not a time this journal can hold: {text!r}")
    return round(seconds * 1000)


def parse_header(text: str) -> tuple[str, bytes]:
    """``NAME=VALUE`` (the value as UTF-8 bytes)."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"not NAME=VALUE: {text!r}")
    return name, value.encode("utf-8", "surrogateescape")


@attrs.frozen
class Filter:
    """Which records ``dump`` shows."""

    start_id: int = 0
    end_id: int | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()

    @property
    def by_content(self) -> bool:
        """Whether a key or header must match (every record in the range is read)."""
        return self.key is not None or bool(self.headers)

    def past(self, rec: Put) -> bool:
        """Nothing from ``rec`` on can match: it is past ``--end`` or added after ``--until``."""
        return (self.end_id is not None and rec.id > self.end_id) or (
            self.until_ms is not None and rec.add_ms > self.until_ms
        )

    def matches(self, rec: Put) -> bool:
        """``rec`` is in the range and carries the key and headers asked for."""
        if rec.id < self.start_id or (self.since_ms is not None and rec.add_ms < self.since_ms):
            return False
        if not self.by_content:
            return True
        if not isinstance(rec, PutX):
            return False
        meta = rec.meta
        if self.key is not None and meta.key != self.key:
            return False
        return all(meta.headers.get(name) == value for name, value in self.headers)

    def id_range(self, path: str, name: str) -> tuple[int, int | None]:
        """The ids the scan covers: from ``--start`` or the first id added at or after
        ``--since``, to ``--end`` or the last id added at or before ``--until`` (None: the end)."""
        if self.since_ms is None and self.until_ms is None:
            return self.start_id, self.end_id
        view = QueueView(path, name)
        first, last = self.start_id, self.end_id
        if self.since_ms is not None:
            first = max(first, view.locate_time(self.since_ms))
        if self.until_ms is not None:
            before = view.locate_time(self.until_ms + 1) - 1
            last = before if last is None else min(last, before)
        return first, last


def add_filter_options(p: argparse.ArgumentParser) -> None:
    """``dump``'s filter options (``--start`` is dump's own)."""
    p.add_argument("--end", type=int, metavar="ID", help="last item id to show")
    p.add_argument("--since", type=parse_time, metavar="TIME", help="only items put at or after TIME")
    p.add_argument("--until", type=parse_time, metavar="TIME", help="only items put at or before TIME")
    p.add_argument("--key", help="only items with this key (UTF-8)")
    p.add_argument(
        "--header",
        action="append",
        type=parse_header,
        default=[],
        metavar="NAME=VALUE",
        help="only items with this header (repeatable: all must match)",
    )


def filter_from(args: argparse.Namespace, start: int) -> Filter:
    """The :class:`Filter` the command line asks for, from id ``start`` on."""
    return Filter(
        start_id=start,
        end_id=args.end,
        since_ms=args.since,
        until_ms=args.until,
        key=None if args.key is None else args.key.encode("utf-8", "surrogateescape"),
        headers=tuple(args.header),
    )
