"""``journaled dump``: look inside a queue directory without modifying it."""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from typing import Any

from journaled.scan import JournalScanner


def _preview(data: bytes, width: int = 40) -> str:
    text = data[:width].decode("utf-8", "backslashreplace")
    return text + ("..." if len(data) > width else "")


def cmd_dump(args: argparse.Namespace) -> int:
    scanner = JournalScanner(args.path)
    n = 0
    for rec in scanner.records(args.start):
        if args.json:
            row: dict[str, Any] = {
                "id": rec.id,
                "add_ms": rec.add_ms,
                "expire_ms": rec.expire_ms or None,
                "size": len(rec.payload),
            }
            print(json.dumps(row))
        else:
            when = _dt.datetime.fromtimestamp(rec.add_ms / 1000, _dt.timezone.utc)
            print(f"{rec.id:>10}  {when:%Y-%m-%d %H:%M:%S.%f}  {len(rec.payload):>8}  {_preview(rec.payload)!s}")
        n += 1
        if args.limit and n >= args.limit:
            break
    for d in scanner.damage:
        print(f"damage: {d.path} at {d.offset}: {d.reason} ({d.bytes_skipped} bytes skipped)", file=sys.stderr)
    return 1 if scanner.damage else 0


def add_inspect_commands(sub: Any) -> None:
    p = sub.add_parser("dump", help="list the records of a queue directory (read-only)")
    p.add_argument("path", help="queue directory")
    p.add_argument("--start", type=int, default=0, help="first item id to show")
    p.add_argument("--limit", type=int, default=0, help="show at most this many records")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(func=cmd_dump)
