"""``journaled dump/stat/check/repair``: look inside (and, offline, mend) a queue directory.

``dump``, ``stat`` and ``check`` never modify anything (not even a lock file) and are safe
while another process owns the queue.  ``repair`` is offline: it takes the directory lock and
refuses when a live process holds it.  Every command first checks that the path is a directory
holding exactly one queue (or the one ``--name`` picks): anything else is a ``NotAQueue``
(offline/snapshot.py; one line, exit 2), so no command ever creates a file where there is no
queue.  ``stat`` prints :func:`journaled.inspection.inspect_queue`'s snapshot: it takes no lock,
not even to see who holds the directory.  Exit codes: 0 clean/success,
1 damage found (check, dump) or repair failed, 2 usage error or wrong path, 3 the directory is
locked by a live process (repair).
"""

from __future__ import annotations

import argparse
import base64
import datetime as _dt
import json
import sys
from typing import Any

import attrs

from journaled.cli.finding import add_filter_options, filter_from
from journaled.errors import JournaledError, QueueLocked
from journaled.format import speedups
from journaled.format.display import escape as escape  # re-exported: top, dump, dead-letters, the page
from journaled.format.record import Put, PutX
from journaled.inspection import inspect_queue
from journaled.offline import repair
from journaled.offline.scan import JournalScanner
from journaled.offline.snapshot import queue_name, reader_state


class UsageError(Exception):
    """A wrong path or option: the command prints the message on one line and exits 2."""


def _preview(data: bytes, width: int = 40) -> str:
    text = escape(data[:width].decode("utf-8", "backslashreplace"))
    return text + ("..." if len(data) > width else "")


def show_bytes(data: bytes) -> str:
    """A key or header value for a terminal: printable ASCII (``0x20``-``0x7e``) as itself, a
    backslash as ``\\\\``, every other byte as ``\\xNN``; so two values that differ always show
    differently and nothing in them reaches the terminal as a control."""
    out = []
    for b in data:
        if b == 0x5C:
            out.append("\\\\")
        elif 0x20 <= b < 0x7F:
            out.append(chr(b))
        else:
            out.append(f"\\x{b:02x}")
    return "".join(out)


def _when(ms: int) -> str:
    return f"{_dt.datetime.fromtimestamp(ms / 1000, _dt.timezone.utc):%Y-%m-%d %H:%M:%S.%f}"[:-3]


def show_meta(rec: Put) -> str:
    """What a PUTX carries besides its payload, as ``key=... headers={name: value, ...}
    not_before=<UTC time> producer=<id>:<sequence>`` (each part only when present; ``""`` for a
    plain PUT).  Keys and values go through :func:`show_bytes`, names through :func:`escape`."""
    if not isinstance(rec, PutX):
        return ""
    meta, parts = rec.meta, []
    if meta.key is not None:
        parts.append(f"key={show_bytes(meta.key)}")
    if meta.headers:
        shown = ", ".join(f"{escape(k)}: {show_bytes(v)}" for k, v in meta.headers.items())
        parts.append(f"headers={{{shown}}}")
    if meta.not_before_ms:
        parts.append(f"not_before={_when(meta.not_before_ms)}")
    if meta.producer:
        parts.append(f"producer={meta.producer}:{meta.sequence}")
    return " ".join(parts)


def meta_json(rec: Put) -> dict[str, Any]:
    """A record's metadata for ``dump --json``: ``key`` (base64 or null), ``headers`` (name ->
    base64 value, in stored order), ``not_before_ms`` (null for none), ``producer`` and
    ``sequence`` (null for an untagged put)."""
    if not isinstance(rec, PutX):
        return {"key": None, "headers": {}, "not_before_ms": None, "producer": None, "sequence": None}
    meta = rec.meta
    return {
        "key": None if meta.key is None else base64.b64encode(meta.key).decode(),
        "headers": {k: base64.b64encode(v).decode() for k, v in meta.headers.items()},
        "not_before_ms": meta.not_before_ms or None,
        "producer": meta.producer or None,
        "sequence": meta.sequence if meta.producer else None,
    }


def show_payload(data: bytes, how: str) -> str:
    """A payload for a terminal: ``text`` (escaped), ``hex`` or ``base64``."""
    if how == "hex":
        return data.hex()
    if how == "base64":
        return base64.b64encode(data).decode()
    return escape(data.decode("utf-8", "backslashreplace"))


def cmd_dump(args: argparse.Namespace) -> int:
    if args.end is not None and args.end < args.start:
        raise UsageError(f"--end {args.end} is before --start {args.start}: nothing could match")
    if args.since is not None and args.until is not None and args.until < args.since:
        raise UsageError("--until is before --since: nothing could match")
    scanner = JournalScanner(args.path, queue_name(args.path, args.name))
    n = 0
    start, done = args.start, frozenset[int]()
    if args.reader:
        state = reader_state(args.path, scanner.name, args.reader)
        if state is None:
            raise UsageError(f"{args.path}: no reader {args.reader!r} in queue {scanner.name!r}")
        start, done = max(start, state.head), frozenset(state.done)
    wanted = filter_from(args, start)
    for rec in scanner.records(*wanted.id_range(args.path, scanner.name)):
        if wanted.past(rec):
            break  # ids and add times only grow along the journal: nothing later matches
        if rec.id in done or not wanted.matches(rec):
            continue  # committed out of order (not in this reader's view), or filtered out
        if args.json:
            row: dict[str, Any] = {
                "id": rec.id,
                "add_ms": rec.add_ms,
                "expire_ms": rec.expire_ms or None,
                "size": len(rec.payload),
                **meta_json(rec),
            }
            if args.payload:
                row["payload"] = base64.b64encode(rec.payload).decode()
            print(json.dumps(row))
        else:
            when = _dt.datetime.fromtimestamp(rec.add_ms / 1000, _dt.timezone.utc)
            body = show_payload(rec.payload, args.payload) if args.payload else _preview(rec.payload)
            meta = show_meta(rec)
            meta = f"{meta}  " if meta else ""
            print(f"{rec.id:>10}  {when:%Y-%m-%d %H:%M:%S.%f}  {len(rec.payload):>8}  {meta}{body}")
        n += 1
        if args.limit and n >= args.limit:
            break
    for d in scanner.damage:
        print(
            f"damage: {d.path} at {d.offset}: {d.reason} ({d.bytes_skipped} bytes skipped)", file=sys.stderr
        )
    return 1 if scanner.damage else 0


def collect_stat(path: str, name: str | None = None) -> dict[str, Any]:
    """``journaled stat --json``: :func:`journaled.inspection.inspect_queue` as JSON (ages in
    seconds under ``*_s`` names); read-only, never the owner."""
    snap = inspect_queue(path, name)
    owner: dict[str, Any] | None = None
    if snap.owner is not None and snap.owner.error is not None:
        owner = {"error": snap.owner.error}
    elif snap.owner is not None:
        owner = {
            "health": attrs.asdict(snap.owner.health) if snap.owner.health else None,
            "clients": [attrs.asdict(c) for c in snap.owner.clients],
        }
    return {
        "path": snap.path,
        "queue": snap.name,
        "owner_pid": snap.owner_pid,
        "files": snap.files,
        "bytes": snap.bytes,
        "first_id": snap.first_id,
        "next_id": snap.next_id,
        "items": snap.items,
        "oldest_item_age_s": snap.oldest_item_age,
        "newest_file_age_s": snap.newest_file_age,
        "readers": [
            {
                "name": r.name,
                "head": r.head,
                "backlog_items": r.backlog_items,
                "backlog_bytes": r.backlog_bytes,
                "oldest_uncommitted_age_s": r.oldest_age,
                "live": r.live,
                "done_out_of_order": r.done_out_of_order,
                "checkpoint_age_s": r.checkpoint_age,
                "checkpoint_ok": r.checkpoint_ok,
                "open_reads": r.open_reads,
                "items_delayed": r.items_delayed,
                "items_not_due": r.items_not_due,
                "items_behind_keys": r.items_behind_keys,
                "oldest_key_wait_s": r.oldest_key_wait,
                "dead_lettered": r.dead_lettered,
                "expired": r.expired,
            }
            for r in snap.readers
        ],
        "external_readers": [
            {"name": b.name, "head": b.head, "lag": b.lag, "bookmark_age_s": b.bookmark_age}
            for b in snap.external_readers
        ],
        "damaged_files_kept": list(snap.damaged_files_kept),
        "owner": owner,
    }


def cmd_stat(args: argparse.Namespace) -> int:
    st = collect_stat(args.path, args.name)
    # every name in these lines came from disk or from the owner (the path, external/ entries,
    # *.damaged files, errors): one escaping for all of them, as top, dump and dead-letters
    if args.json:
        print(json.dumps(st))
        return 0
    owner = st["owner_pid"]
    _say(f"queue {st['queue']} at {st['path']}" + (f" (open by pid {owner})" if owner else " (not open)"))
    _say(
        f"  files {st['files']}, {st['bytes']} bytes, ids {st['first_id']}..{st['next_id'] - 1} "
        f"({st['items']} items)"
    )
    if st["oldest_item_age_s"] is not None:
        _say(
            f"  oldest item {st['oldest_item_age_s']:.1f} s old, "
            f"newest file {st['newest_file_age_s']:.1f} s old"
        )
    for r in st["readers"]:
        age = r["oldest_uncommitted_age_s"]
        _say(
            f"  reader {r['name']}: head {r['head']}, backlog_items {r['backlog_items']} "
            f"({r['backlog_bytes']} bytes"
            + ("" if age is None else f", oldest uncommitted {age:.1f} s old")
            + f"), {r['done_out_of_order']} committed out of order, checkpoint "
            + (f"{r['checkpoint_age_s']:.1f} s old" if r["checkpoint_ok"] else "missing or damaged")
            + (" (figures from the live owner)" if r["live"] else "")
        )
        if r["open_reads"] is not None:
            _say(
                f"    open reads {r['open_reads']}, delayed {r['items_delayed']}, "
                f"not yet due {r['items_not_due']}, "
                f"dead-lettered {r['dead_lettered']}, expired {r['expired']}"
            )
        if r["items_behind_keys"]:
            wait = r["oldest_key_wait_s"]
            _say(
                f"    behind a busy key (key order) {r['items_behind_keys']}"
                + ("" if wait is None else f", the oldest waiting {wait:.1f} s")
            )
    for r in st["external_readers"]:
        age = "" if r["bookmark_age_s"] is None else f", bookmark {r['bookmark_age_s']:.1f} s old"
        _say(f"  external reader {r['name']}: head {r['head']}, lag {r['lag']}{age}")
    for d in st["damaged_files_kept"]:
        _say(f"  kept aside by recovery: {d}")
    live = st["owner"]
    if live is not None and "error" in live:
        _say(f"  owner: {live['error']}")
    elif live is not None:
        health = live["health"]
        if health is None or health["ok"]:
            _say("  health: ok")
        else:
            problems = []
            if health["poisoned"]:
                problems.append(f"poisoned: {health['poisoned']}")
            if health["failing"]:
                problems.append(f"failing: {', '.join(health['failing'])} ({health['errors']} errors)")
            if health.get("sinkless_readers"):
                held = ", ".join(health["sinkless_readers"])
                problems.append(f"running without a stored sink (a policy suspended, its items kept): {held}")
            if health.get("poison_readers"):
                held = ", ".join(health["poison_readers"])
                problems.append(f"held by a poison item (its head failed again and again): {held}")
            if health.get("stopped_readers"):
                held = ", ".join(health["stopped_readers"])
                problems.append(f"stopped at a record of a newer format (see their 'stopped'): {held}")
            if health.get("skipped_entries"):
                held = ", ".join(health["skipped_entries"])
                problems.append(f"entries of external/ skipped, not regular files (no bookmark read): {held}")
            _say(f"  health: {'; '.join(problems) or 'not ok'}")
            if health["last_error"]:
                _say(f"    last error: {health['last_error']}")
        for c in live["clients"]:
            reads = ", ".join(f"{n} {k}" for n, k in sorted(c["open_reads"].items())) or "none"
            _say(f"  client pid {c['pid']}: {c['connections']} connection(s), open reads: {reads}")
        if not live["clients"]:
            _say("  no other process is using it")
    _say(f"  hot path (this process): {speedups.describe()}")
    from journaled import hotpath  # the queue's parts: only for this line

    _say(f"  reader core and put path: {hotpath.describe()}")
    return 0


def _say(line: str) -> None:
    print(escape(line))


def cmd_check(args: argparse.Namespace) -> int:
    report = repair.check_dir(args.path, queue_name(args.path, args.name))
    if args.json:
        print(
            json.dumps(
                {
                    "queue": report.name,
                    "files": report.files,
                    "records": report.records,
                    "clean": report.clean,
                    "findings": [attrs.asdict(f) for f in report.findings],
                }
            )
        )
    else:
        for f in report.findings:
            lost = f", ids {f.ids_lost[0]}..{f.ids_lost[1]} lost" if f.ids_lost else ""
            print(
                f"{f.kind}: {f.path} at byte {f.offset}: {f.reason} ({f.bytes} bytes){lost}; on open: "
                f"{f.on_open}"
            )
        state = "clean" if report.clean else f"{len(report.findings)} problem(s)"
        print(f"checked {report.files} journal file(s), {report.records} valid records: {state}")
        if any(f.kind in _REPAIRABLE for f in report.findings):
            named = f" --name {report.name}" if args.name else ""
            print(
                f"to rewrite the queue so it opens cleanly in any recovery mode (originals kept): "
                f"journaled repair {args.path}{named}"
            )
    return 0 if report.clean else 1


# what ``repair`` rewrites; foreign files and id gaps it leaves as they are
_REPAIRABLE = ("damage", "torn-tail", "bad-header", "damaged-header", "bad-checkpoint", "bad-registry")


def cmd_repair(args: argparse.Namespace) -> int:
    name = queue_name(args.path, args.name)  # never take a lock where there is no queue
    try:
        backup, actions = repair.repair_dir(args.path, args.mode, name)
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
    p.add_argument("--name", help="which queue, where the directory holds several")
    p.add_argument("--start", type=int, default=0, metavar="ID", help="first item id to show")
    p.add_argument("--limit", type=int, default=0, help="show at most this many records")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--reader", help="show only what this reader has not committed yet")
    add_filter_options(p)
    p.add_argument(
        "--payload",
        nargs="?",
        const="text",
        choices=("text", "hex", "base64"),
        help="print whole payloads: text (control bytes escaped; the default), hex or "
        "base64; with --json always base64.  An item's key, headers and not-before are shown "
        "before it (key=... headers={name: value} not_before=...; bytes outside printable "
        "ASCII as \\xNN, a backslash as \\\\; base64 with --json)",
    )
    p.set_defaults(func=cmd_dump)

    p = sub.add_parser(
        "stat",
        help="readers, heads, backlog, files, bytes, ages (read-only)",
        description="Print a queue's state once: its journal files, and per reader the backlog, the "
        "age of the oldest item not yet committed, open reads, delayed items and dead letters; with a "
        "running owner also its health and the processes using the queue.  It never takes the "
        "directory, never becomes the owner and creates or changes nothing, so it is safe beside a "
        "running owner.  'journaled top' shows the same figures live.",
    )
    p.add_argument("path", help="queue directory")
    p.add_argument("--name", help="which queue, where the directory holds several")
    p.add_argument(
        "--json", action="store_true", help="one JSON object (every key is described in docs/cli.md)"
    )
    p.set_defaults(func=cmd_stat)

    p = sub.add_parser(
        "check", help="verify every journal file and checkpoint (read-only); exit 1 if damaged"
    )
    p.add_argument("path", help="queue directory")
    p.add_argument("--name", help="which queue, where the directory holds several")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("repair", help="rewrite a damaged queue offline (originals kept in repair-<time>/)")
    p.add_argument("path", help="queue directory (must not be open in a live process)")
    p.add_argument("--name", help="which queue, where the directory holds several")
    p.add_argument(
        "--mode",
        choices=("salvage", "point_in_time"),
        default="salvage",
        help="salvage: keep every valid record (default); point_in_time: cut each "
        "damaged file at its first damage",
    )
    p.set_defaults(func=cmd_repair)
