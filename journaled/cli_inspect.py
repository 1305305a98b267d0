"""``journaled dump/stat/check/repair``: look inside (and, offline, mend) a queue directory.

``dump``, ``stat`` and ``check`` never modify anything and are safe while another process owns
the queue.  ``repair`` is offline: it takes the directory lock and refuses when a live process
holds it.  Exit codes: 0 clean/success, 1 damage found (check, dump), 2 usage error,
3 the directory is locked by a live process (repair).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import time
from typing import Any

import attrs

from journaled.checkpoint import (
    checkpoint_path,
    list_checkpoints,
    read_checkpoint,
    read_registry,
    registry_path,
)
from journaled.filecodec import CheckpointData

from journaled import repair, speedups
from journaled.dirlock import owner_pid
from journaled.errors import JournaledError, QueueLocked
from journaled.scan import JournalScanner


def _preview(data: bytes, width: int = 40) -> str:
    text = data[:width].decode("utf-8", "backslashreplace")
    return text + ("..." if len(data) > width else "")


def cmd_dump(args: argparse.Namespace) -> int:
    scanner = JournalScanner(args.path)
    n = 0
    start, done = args.start, frozenset[int]()
    if args.reader:
        state = _reader_state(args.path, scanner.name, args.reader)
        if state is None:
            print(f"no reader {args.reader!r} in {args.path}", file=sys.stderr)
            return 2
        start, done = max(start, state.head), frozenset(state.done)
    for rec in scanner.records(start):
        if rec.id in done:
            continue  # committed out of order: not in this reader's view
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


def _reader_state(path: str, name: str, reader: str) -> CheckpointData | None:
    ck = checkpoint_path(path, name, reader)
    if not os.path.exists(ck):
        return None
    return read_checkpoint(ck) or CheckpointData(head=0)


def collect_stat(path: str) -> dict[str, Any]:
    """Readers, heads, backlog, files, bytes and ages of a queue directory (read-only)."""
    scanner = JournalScanner(path)
    name = scanner.name
    files = scanner.files()
    now = time.time()
    next_id = 1
    first_id = 1
    oldest_ms: int | None = None
    if files:
        good = [f for f in files if f.header is not None]
        if good:
            first_id = good[0].header.first_id  # type: ignore[union-attr]
            next_id = good[-1].header.first_id  # type: ignore[union-attr]
            for rec in scanner.records(next_id):
                next_id = rec.id + 1
            for rec in scanner.records(first_id):
                oldest_ms = rec.add_ms
                break
    names = set(list_checkpoints(path, name)) | set(read_registry(registry_path(path, name)) or ())
    readers = []
    for r in sorted(names):
        state = _reader_state(path, name, r)
        ck = checkpoint_path(path, name, r)
        head = max(state.head, first_id) if state else first_id
        done = [i for i in (state.done if state else ()) if head <= i < next_id]
        readers.append({
            "name": r,
            "head": head,
            "backlog": max(0, next_id - head - len(done)),
            "done_out_of_order": len(done),
            "checkpoint_age_s": round(now - os.path.getmtime(ck), 3) if os.path.exists(ck) else None,
            "checkpoint_ok": state is not None and os.path.exists(ck),
        })
    return {
        "path": os.path.abspath(path),
        "queue": name,
        "owner_pid": owner_pid(path),
        "files": len(files),
        "bytes": sum(f.size for f in files),
        "first_id": first_id,
        "next_id": next_id,
        "items": next_id - first_id,
        "oldest_item_age_s": round(now - oldest_ms / 1000, 3) if oldest_ms else None,
        "newest_file_age_s": round(now - files[-1].ms / 1000, 3) if files else None,
        "readers": readers,
        "damaged_files_kept": sorted(e for e in os.listdir(path) if e.endswith(".damaged")),
    }


def cmd_stat(args: argparse.Namespace) -> int:
    st = collect_stat(args.path)
    if args.json:
        print(json.dumps(st))
        return 0
    owner = st["owner_pid"]
    print(f"queue {st['queue']} at {st['path']}" + (f" (open by pid {owner})" if owner else " (not open)"))
    print(f"  files {st['files']}, {st['bytes']} bytes, ids {st['first_id']}..{st['next_id'] - 1} "
          f"({st['items']} items)")
    if st["oldest_item_age_s"] is not None:
        print(
            f"  oldest item {st['oldest_item_age_s']:.1f} s old, "
            f"newest file {st['newest_file_age_s']:.1f} s old"
        )
    for r in st["readers"]:
        print(f"  reader {r['name']}: head {r['head']}, backlog {r['backlog']}, "
              f"{r['done_out_of_order']} committed out of order, checkpoint "
              + (f"{r['checkpoint_age_s']:.1f} s old" if r["checkpoint_ok"] else "missing or damaged"))
    for d in st["damaged_files_kept"]:
        print(f"  kept aside by recovery: {d}")
    print(f"  hot path (this process): {speedups.describe()}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    report = repair.check_dir(args.path)
    if args.json:
        print(json.dumps({
            "queue": report.name, "files": report.files, "records": report.records,
            "clean": report.clean, "findings": [attrs.asdict(f) for f in report.findings],
        }))
    else:
        for f in report.findings:
            lost = f" ids {f.ids_lost[0]}..{f.ids_lost[1]} affected" if f.ids_lost else ""
            print(f"{f.kind}: {f.path} at byte {f.offset}: {f.reason} ({f.bytes} bytes){lost}")
        state = "clean" if report.clean else f"{len(report.findings)} problem(s)"
        print(f"checked {report.files} journal file(s), {report.records} valid records: {state}")
    return 0 if report.clean else 1


def cmd_repair(args: argparse.Namespace) -> int:
    try:
        backup, actions = repair.repair_dir(args.path, args.mode)
    except QueueLocked as exc:
        print(f"refusing to repair: {exc}; stop that process first", file=sys.stderr)
        return 3
    except JournaledError as exc:
        print(f"repair failed: {exc}", file=sys.stderr)
        return 1
    for a in actions:
        print(a)
    if backup:
        print(f"originals kept in {backup}")
    return 0


def add_inspect_commands(sub: Any) -> None:
    p = sub.add_parser("dump", help="list the records of a queue directory (read-only)")
    p.add_argument("path", help="queue directory")
    p.add_argument("--start", type=int, default=0, help="first item id to show")
    p.add_argument("--limit", type=int, default=0, help="show at most this many records")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--reader", help="show only what this reader has not committed yet")
    p.set_defaults(func=cmd_dump)

    p = sub.add_parser("stat", help="readers, heads, backlog, files, bytes, ages (read-only)")
    p.add_argument("path", help="queue directory")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(func=cmd_stat)

    p = sub.add_parser(
        "check", help="verify every journal file and checkpoint (read-only); exit 1 if damaged"
    )
    p.add_argument("path", help="queue directory")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser(
        "repair", help="rewrite a damaged queue offline (originals kept in repair-<time>/)"
    )
    p.add_argument("path", help="queue directory (must not be open in a live process)")
    p.add_argument("--mode", choices=("salvage", "point_in_time"), default="salvage",
                   help="salvage: keep every valid record (default); point_in_time: cut each "
                   "damaged file at its first damage")
    p.set_defaults(func=cmd_repair)
