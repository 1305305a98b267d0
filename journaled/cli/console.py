"""``journaled put PATH`` and ``journaled get PATH --reader R``: a queue from the shell.

What ``kafka-console-producer``/``-consumer`` and ``aws sqs send-message`` are to their systems: to
try a queue, feed it by hand, or look at (and, on purpose, take) what a reader would get next.
Both open the queue as any program does -- as its owner when nobody holds it, else as a client of
the process that does -- so they work beside a running service and leave it running.

* ``put``: each MESSAGE argument is an item; without any, each line of standard input is one
  (``--file F`` makes the whole file one item, ``-`` for standard input).  ``--key``,
  ``--header name=value`` (repeatable), ``--delay``/``--ttl`` as ``JournaledQueue.put`` takes them.
  Prints each item's id.  All the items go in with one ``put_many``: all or none.
* ``get``: opens reads of the next items of an existing reader (``--count``, or ``--follow`` until
  Ctrl-C) and prints them (payloads escaped for the terminal, or ``--json``).  Without
  ``--commit`` every read is given back as it was (released: no error counted, still next for
  that reader): a look, not a take.  ``--commit`` takes them for good.

Both refuse, with one line and exit status 2, a path that holds no queue (``put --create`` makes
one), an unknown reader, and a wrong option; Ctrl-C is exit 130 with every open read given back.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

from journaled.cli.finding import parse_header
from journaled.cli.inspection import UsageError, escape, show_bytes, show_payload
from journaled.errors import Empty
from journaled.item import Item
from journaled.offline.snapshot import queue_name


def _open(path: str, name: str | None, create: bool = False) -> Any:
    from journaled.queue import JournaledQueue  # opening a queue is what these two commands do

    if create and (not os.path.isdir(path) or not os.listdir(path)):
        return JournaledQueue(path, name=name)  # a new queue in a missing or empty directory
    return JournaledQueue(path, name=queue_name(path, name))


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be zero or more seconds: {text!r}")
    return value


def _payloads(args: argparse.Namespace) -> list[bytes]:
    if args.file is not None:
        if args.messages:
            raise UsageError("give MESSAGE arguments or --file, not both")
        if args.file == "-":
            return [sys.stdin.buffer.read()]
        with open(args.file, "rb") as f:
            return [f.read()]
    if args.messages:
        return [os.fsencode(m) for m in args.messages]
    return [line.rstrip(b"\n") for line in sys.stdin.buffer]


def cmd_put(args: argparse.Namespace) -> int:
    payloads = _payloads(args)
    if not payloads:
        raise UsageError("nothing to put (no MESSAGE, and standard input was empty)")
    options: dict[str, Any] = {}
    if args.header:
        options["headers"] = dict(args.header)
    if args.key is not None:
        options["keys"] = [os.fsencode(args.key)] * len(payloads)
    if args.delay is not None:
        options["delay"] = args.delay
    if args.ttl is not None:
        options["ttl"] = args.ttl
    with _open(args.path, args.name, args.create) as q:
        ids = q.put_many(payloads, **options)
    for item_id in ids:
        print(json.dumps({"id": item_id}) if args.json else item_id)
    return 0


def _shown(item: Item, how: str) -> str:
    parts = [str(item.id)]
    if item.key is not None:
        parts.append(f"key={show_bytes(item.key)}")
    if item.headers:
        parts.append(
            "headers={" + ", ".join(f"{escape(k)}: {show_bytes(v)}" for k, v in item.headers.items()) + "}"
        )
    if item.error_count:
        parts.append(f"errors={item.error_count}")
    parts.append(show_payload(bytes(item.data), how))
    return " ".join(parts)


def _as_json(item: Item) -> str:
    b64 = base64.b64encode
    return json.dumps(
        {
            "id": item.id,
            "add_time": item.add_time,
            "error_count": item.error_count,
            "key": None if item.key is None else b64(item.key).decode(),
            "headers": {k: b64(v).decode() for k, v in item.headers.items()},
            "payload": b64(bytes(item.data)).decode(),
        }
    )


def _items(reader: Any, args: argparse.Namespace) -> Iterator[Item]:
    """The reads to show: ``--count`` of them (waiting up to ``--timeout`` for each), or with
    ``--follow`` every one as it comes, until Ctrl-C."""
    n = 0
    while args.follow or n < args.count:
        try:
            item = reader.get(timeout=None if args.follow else args.timeout)
        except Empty:
            return
        n += 1
        yield item


def cmd_get(args: argparse.Namespace) -> int:
    if args.count < 1:
        raise UsageError(f"--count must be at least 1, not {args.count}")
    with _open(args.path, args.name) as q:
        if args.reader not in q.readers():
            known = ", ".join(q.readers()) or "none"
            raise UsageError(f"{args.path}: no reader {args.reader!r} (readers: {known})")
        reader = q.reader(args.reader)
        held: list[Item] = []
        shown = 0
        try:
            for item in _items(reader, args):
                held.append(item)
                print(_as_json(item) if args.json else _shown(item, args.payload), flush=True)
                shown += 1
                if args.commit:
                    reader.commit(item)
                    held.remove(item)
        finally:
            # a look, not a take (or Ctrl-C came first): back as they were.  Given-back reads
            # stack up at the head (the last one given back is delivered first), so newest first
            for item in reversed(held):
                reader.release(item)
    if shown == 0 and not args.json:
        print(f"journaled get: nothing waiting for reader {args.reader!r}", file=sys.stderr)
    return 0


def add_console_commands(sub: Any) -> None:
    p = sub.add_parser(
        "put",
        help="put items into a queue from the shell (arguments, lines of stdin, or a file)",
        description="Put items into the queue at PATH (as its owner, or as a client of the process "
        "that owns it). Each MESSAGE is an item; without any, each line of standard input is one. "
        "Prints each item's id.",
    )
    p.add_argument("path", help="the queue's directory")
    p.add_argument("messages", nargs="*", metavar="MESSAGE", help="items to put (UTF-8 text)")
    p.add_argument("--name", help="which queue, where the directory holds several")
    p.add_argument("--file", metavar="F", help="put the whole of file F as one item ('-': standard input)")
    p.add_argument("--key", help="the items' key (de-duplicated within the queue's dedup_window)")
    p.add_argument(
        "--header", action="append", type=parse_header, metavar="NAME=VALUE", help="a header (repeatable)"
    )
    p.add_argument("--delay", type=_seconds, metavar="S", help="deliver no earlier than S seconds from now")
    p.add_argument("--ttl", type=_seconds, metavar="S", help="expire S seconds from now")
    p.add_argument("--create", action="store_true", help="make a new queue if PATH is missing or empty")
    p.add_argument("--json", action="store_true", help="one JSON object per item")
    p.set_defaults(func=cmd_put, command_parser=p)

    p = sub.add_parser(
        "get",
        help="show (or with --commit take) the next items of a reader",
        description="Open reads of the next items of READER and print them. Without --commit each "
        "is given back as it was (no error counted): a look, not a take.",
    )
    p.add_argument("path", help="the queue's directory")
    p.add_argument("--reader", required=True, help="an existing reader of the queue")
    p.add_argument("--name", help="which queue, where the directory holds several")
    p.add_argument("--count", type=int, default=1, metavar="N", help="at most N items (default 1)")
    p.add_argument("--follow", action="store_true", help="keep printing items as they come, until Ctrl-C")
    p.add_argument(
        "--timeout", type=_seconds, default=0.0, metavar="S", help="wait up to S seconds for each item"
    )
    p.add_argument("--commit", action="store_true", help="commit each item printed (take it for good)")
    p.add_argument("--peek", dest="commit", action="store_false", help="give each item back (the default)")
    p.add_argument(
        "--json", action="store_true", help="one JSON object per item (key, headers, payload base64)"
    )
    p.add_argument(
        "--payload",
        choices=("text", "hex", "base64"),
        default="text",
        help="how to show payloads (default: text)",
    )
    p.set_defaults(func=cmd_get, command_parser=p)
