"""``journaled dead-letters PATH`` and ``journaled redrive DEAD_PATH --to PATH``: a dead-letter
queue from the command line (docs/design.md, "Dead letters from the command line").

A dead-letter queue is a queue whose items are :class:`~journaled.DeadLetter` envelopes.  What
is still "in" it is what the reader :data:`REDRIVE_READER` has not committed (every item on
disk while that reader does not exist yet).

``dead-letters`` lists them from the files alone, like ``journaled dump``: no lock, nothing
created or written, never the owner, never a client.  While a process owns the queue the
listing is as of its files: dead letters it has not written out yet, and redrives it has not
checkpointed yet, are not seen (a note on stderr says so).

``redrive`` opens the dead-letter queue (as its owner, or as a client of its owner), reads it
through :data:`REDRIVE_READER`, and hands each selected dead letter's payload to the target as a
spool batch of one item whose key is derived from the dead letter (:func:`redrive_key`), then
commits it.  The target adopts a key once, for good (owner/adoption.py), so a redrive killed
anywhere and run again puts every selected dead letter into the target exactly once.  Dead
letters not selected are released (not consumed, no error counted) and stay.
"""

from __future__ import annotations

import argparse
import base64
import datetime as _dt
import hashlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from typing import Any

import attrs

from journaled.cli.inspection import UsageError, escape, show_bytes, show_payload
from journaled.deadletter import KINDS, DeadLetter
from journaled.disk.spoolfiles import BatchWriter, new_temp_path, pending_batches, publish, spool_dir
from journaled.disk.spoolledger import Ledger
from journaled.errors import Empty, JournaledError
from journaled.format.metadata import Meta
from journaled.item import Item
from journaled.offline.scan import JournalScanner
from journaled.offline.snapshot import lock_holder, queue_name, reader_state

#: The reader of the dead-letter queue that ``redrive`` consumes through; what it has committed
#: has been redriven.
REDRIVE_READER = "journaled-redrive"

#: Test-only hook (tests/cli/test_dead_letters.py): with ``N`` in this environment variable,
#: ``redrive`` stops for good right after its N-th target put, before committing that dead
#: letter, and says so on stderr, so that a test can kill it with SIGKILL at the worst moment.
PAUSE_ENV = "JOURNALED_TEST_REDRIVE_PAUSE"

#: Dead letters taken per request from the dead-letter queue.
BATCH = 64

#: Longest wait, in seconds, for dead letters that an interrupted redrive left in the reader's
#: retry backoff (a client killed while holding reads: its owner aborted them).
DELAYED_WAIT = 10.0


@attrs.frozen
class Selection:
    """Which dead letters a command acts on: ``reason`` is a substring of the envelope's reason
    (case-sensitive), ``kind`` and ``reader`` match exactly; None matches anything.  An item that
    is not an envelope matches only when nothing is asked."""

    reason: str | None = None
    kind: str | None = None
    reader: str | None = None

    def matches(self, letter: DeadLetter | None) -> bool:
        if letter is None:
            return self.reason is None and self.kind is None and self.reader is None
        return (
            (self.reason is None or self.reason in letter.reason)
            and (self.kind is None or letter.kind == self.kind)
            and (self.reader is None or letter.reader == self.reader)
        )


def envelope(data: bytes | bytearray | memoryview) -> tuple[DeadLetter | None, str | None]:
    """The dead letter in ``data``, or None and why it is not one."""
    try:
        return DeadLetter.decode(data), None
    except ValueError as exc:
        return None, str(exc)


def redrive_key(queue: str, dead_id: int, dead_add_ms: int, data: bytes) -> str:
    """The spool key of one dead letter: the same dead letter always gives the same key (so a
    redrive run again after a crash is dropped by the target), and no other dead letter does:
    the dead-letter queue's name, the id and add time the dead letter has there (a queue made
    anew at the same path has other add times), and a digest of the whole envelope.  Not the
    path, so that a moved dead-letter queue keeps its keys."""
    h = hashlib.sha256(f"{queue}\0{dead_id}\0{dead_add_ms}\0".encode())
    h.update(data)
    return f"redrive:{dead_id}:{h.hexdigest()[:32]}"


def _when(ms: float) -> str:
    """A time for a person: a UTC date, or the seconds themselves when no date can show them
    (an envelope written by anyone may say ``1e300`` or ``nan``)."""
    try:
        return f"{_dt.datetime.fromtimestamp(ms / 1000, _dt.timezone.utc):%Y-%m-%d %H:%M:%S.%f}"[:-3]
    except (OverflowError, ValueError, OSError):
        return f"{ms / 1000!r}s"


def _selection(args: argparse.Namespace) -> Selection:
    return Selection(args.reason, args.kind, args.reader)


def _limit(args: argparse.Namespace) -> int | None:
    if args.limit is not None and args.limit < 1:
        raise UsageError(f"--limit must be at least 1, not {args.limit}")
    return args.limit  # type: ignore[no-any-return]


# ------------------------------------------------------------------------------ dead-letters
def _records(path: str, name: str, everything: bool) -> Iterator[tuple[int, int, bytes, bool]]:
    """(dead id, add ms, payload, redriven) of every record on disk that :data:`REDRIVE_READER`
    has not committed (``everything``: of every record on disk)."""
    scanner = JournalScanner(path, name)
    state = reader_state(path, name, REDRIVE_READER)
    head, done = (state.head, frozenset(state.done)) if state is not None else (0, frozenset[int]())
    for rec in scanner.records(0 if everything else head):
        redriven = rec.id < head or rec.id in done
        if redriven and not everything:
            continue
        yield rec.id, rec.add_ms, rec.payload, redriven
    for d in scanner.damage:
        print(
            f"damage: {d.path} at {d.offset}: {d.reason} ({d.bytes_skipped} bytes skipped)", file=sys.stderr
        )


def _row(dead_id: int, add_ms: int, data: bytes, redriven: bool, payload: bool) -> dict[str, Any]:
    letter, why = envelope(data)
    row: dict[str, Any] = {"dead_id": dead_id, "dead_lettered_at": add_ms / 1000, "redriven": redriven}
    if letter is None:
        row.update(envelope=False, error=why, size=len(data))
        if payload:
            row["payload"] = base64.b64encode(data).decode()
        return row
    row.update(
        envelope=True,
        kind=letter.kind,
        reason=letter.reason,
        reader=letter.reader,
        id=letter.id,
        error_count=letter.error_count,
        add_time=letter.add_time,
        expire_at=letter.expire_at,
        size=len(letter.data),
        key=None if letter.key is None else base64.b64encode(letter.key).decode(),
        headers={name: base64.b64encode(value).decode() for name, value in letter.headers.items()},
    )
    if payload:
        row["payload"] = base64.b64encode(letter.data).decode()
    return row


def _line(row: dict[str, Any], data: bytes, how: str | None) -> str:
    state = "  (redriven)" if row["redriven"] else ""
    head = f"{row['dead_id']:>8}  {_when(row['dead_lettered_at'] * 1000)}"
    if not row["envelope"]:
        text = f"{head}  not a dead-letter envelope ({escape(row['error'])}), {row['size']} bytes{state}"
        shown = data
    else:
        expire = "" if row["expire_at"] is None else f"  expire_at={_when(row['expire_at'] * 1000)}"
        text = (
            f"{head}  {escape(row['kind']):<10}  reader={escape(row['reader'])}  id={row['id']}  "
            f"errors={row['error_count']}  added={_when(row['add_time'] * 1000)}{expire}  "
            f"{row['size']} bytes  reason={json.dumps(row['reason'])}{state}"
        )
        letter = DeadLetter.decode(data)
        if letter.key is not None or letter.headers:
            meta = [] if letter.key is None else [f"key={show_bytes(letter.key)}"]
            if letter.headers:
                pairs = ", ".join(f"{escape(k)}: {show_bytes(v)}" for k, v in letter.headers.items())
                meta.append(f"headers={{{pairs}}}")
            text += "\n          " + " ".join(meta)
        shown = letter.data
    if how is not None:
        text += f"\n          payload: {show_payload(shown, how)}"
    return text


def cmd_dead_letters(args: argparse.Namespace) -> int:
    path = os.path.abspath(args.path)
    name = queue_name(path, args.name)
    select, limit = _selection(args), _limit(args)
    holder = lock_holder(path)
    if holder is not None:
        who = f"pid {holder}" if holder > 0 else "another process"
        print(
            f"journaled dead-letters: note: {who} owns {path}; this lists its files: dead letters it has "
            "not written out yet, and redrives it has not checkpointed yet, are not seen",
            file=sys.stderr,
        )
    how = args.payload_format or ("text" if args.payload else None)
    shown = 0
    for dead_id, add_ms, data, redriven in _records(path, name, args.all):
        if limit is not None and shown >= limit:
            break
        if not select.matches(envelope(data)[0]):
            continue
        row = _row(dead_id, add_ms, data, redriven, how is not None)
        print(json.dumps(row) if args.json else _line(row, data, how))
        shown += 1
    if not args.json:
        what = "dead letter" if shown == 1 else "dead letters"
        print(f"{shown} {what}" + (" (--limit reached)" if limit is not None and shown >= limit else ""))
    return 0


# ------------------------------------------------------------------------------ redrive
def _test_pause(puts: int) -> None:
    at = os.environ.get(PAUSE_ENV)
    if at is not None and at.isdigit() and puts == int(at):
        print(f"journaled redrive: paused after {puts} puts ({PAUSE_ENV})", file=sys.stderr, flush=True)
        while True:  # until killed: the test's SIGKILL
            signal.pause()


def _spool_one(target: str, key: str, letter: DeadLetter) -> None:
    """Put the letter's payload into the target's spool as a batch of one keyed ``key`` (durable
    on return), with the item's headers and key: a redrive is a new put of the same item, so its
    old expiry and not-before are over, and the spool does not de-duplicate keys."""
    tmp = new_temp_path(target)
    meta = letter.meta
    if meta is not None:
        meta = Meta(key=meta.key, headers=meta.headers)
    writer = BatchWriter(tmp, key, with_meta=meta is not None and not meta.empty)
    try:
        writer.add(letter.data, 0, meta if writer.with_meta else None)
        writer.finish()
    except BaseException:
        writer.discard()
        raise
    publish(tmp, target)


@attrs.define
class RedriveCounts:
    """What one ``redrive`` did (printed, or one JSON object with ``--json``)."""

    redriven: int = 0
    already_in_target: int = 0  # its key was adopted before this run: an interrupted run's
    not_selected: int = 0
    not_envelopes: int = 0
    too_large: int = 0
    waiting_in_spool: int = 0


def _take(reader: Any, holding: int) -> list[Item]:
    """The next dead letters available to the redrive reader (``holding``: how many of its open
    reads are ours); [] once there are none.  Waits a while (at most :data:`DELAYED_WAIT`) for
    the ones an interrupted redrive that was a client left behind: its reads, until its owner
    aborts them, then their retry backoff."""
    try:
        return list(reader.get_many(BATCH, block=False))
    except Empty:
        pass
    deadline = time.monotonic() + DELAYED_WAIT
    while time.monotonic() < deadline:
        stats = reader.stats()
        if not stats.items_delayed and stats.open_reads <= holding:
            break
        try:
            return list(reader.get_many(BATCH, timeout=0.2))
        except Empty:
            continue
    return []


def _redrive(
    dq: Any, tq: Any, dname: str, target: str, select: Selection, limit: int | None
) -> RedriveCounts:
    done = RedriveCounts()
    reader = dq.reader(REDRIVE_READER)
    adopted = Ledger(spool_dir(target))  # read once: the keys the target adopted before this run
    largest = tq.config.max_item_size if tq.is_owner else None  # a client does not know the owner's
    # our open reads not committed: given back (released, no error counted) when the run ends,
    # however it ends, so the dead letters not selected stay where they were
    taken: dict[int, Item] = {}
    try:
        while limit is None or done.redriven < limit:
            items = _take(reader, len(taken))
            if not items:
                break
            taken.update((item.id, item) for item in items)
            for item in items:
                if limit is not None and done.redriven >= limit:
                    continue
                letter, _ = envelope(item.data)
                if letter is None or not select.matches(letter):
                    done.not_envelopes += letter is None
                    done.not_selected += letter is not None
                    continue
                if largest is not None and len(letter.data) > largest:
                    done.too_large += 1
                    continue
                key = redrive_key(dname, item.id, round(item.add_time * 1000), bytes(item.data))
                if adopted.adopted(key):
                    done.already_in_target += 1
                else:
                    _spool_one(target, key, letter)
                done.redriven += 1
                _test_pause(done.redriven)
                reader.commit(item)
                del taken[item.id]
    finally:
        # newest first: given-back reads stack up at the head, so they stay in id order
        for item in sorted(taken.values(), key=lambda it: it.id, reverse=True):
            try:
                reader.release(item)
            except JournaledError:  # the queue is closing or its owner is gone: it is redelivered
                pass
    if tq.is_owner:
        tq.adopt_spool()
    done.waiting_in_spool = len(pending_batches(target))
    return done


def cmd_redrive(args: argparse.Namespace) -> int:
    from journaled.queue import JournaledQueue  # the one command here that opens queues

    dead, target = os.path.abspath(args.path), os.path.abspath(args.to)
    dname = queue_name(dead, args.name)
    tname = queue_name(target, args.to_name)
    select, limit = _selection(args), _limit(args)
    if os.path.realpath(dead) == os.path.realpath(target):
        raise UsageError("the target is the dead-letter queue's own directory")
    with JournaledQueue(dead, name=dname) as dq, JournaledQueue(target, name=tname) as tq:
        done = _redrive(dq, tq, dname, target, select, limit)
        owned = tq.is_owner
        owner = "" if owned else f" (its owner, pid {getattr(tq, 'owner_pid', '?')}, adopts them)"
    if args.json:
        print(json.dumps(attrs.asdict(done)))
        return 0
    print(f"redrove {done.redriven} dead letter(s) from {dead} to {target}{owner}")
    if done.already_in_target:
        print(f"  {done.already_in_target} of them were in the target already (an interrupted redrive)")
    if done.not_selected or done.not_envelopes or done.too_large:
        print(
            f"  left in the dead-letter queue: {done.not_selected} not selected, {done.not_envelopes} not "
            f"dead-letter envelopes, {done.too_large} larger than the target's max_item_size"
        )
    if done.waiting_in_spool and owned:
        print(f"  {done.waiting_in_spool} batch(es) wait in {spool_dir(target)}: a target reader full?")
    return 0


# ------------------------------------------------------------------------------ registration
def _filters(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", help="which queue, where the directory holds several")
    p.add_argument(
        "--reason", metavar="TEXT", help="only dead letters whose reason contains TEXT (case-sensitive)"
    )
    p.add_argument("--kind", choices=KINDS, help="only dead letters of this kind")
    p.add_argument("--reader", metavar="NAME", help="only dead letters that left this reader")
    p.add_argument("--limit", type=int, metavar="N", help="at most N dead letters")
    p.add_argument("--json", action="store_true", help="JSON output")


def add_dead_letter_commands(sub: Any) -> None:
    p = sub.add_parser(
        "dead-letters",
        help="list the dead letters a dead-letter queue holds (read-only)",
        description="List the dead letters not yet redriven (read from the files; never opens the queue).",
    )
    p.add_argument("path", help="the dead-letter queue's directory")
    _filters(p)
    # A flag, not an option with an optional value: `--payload PATH` must read PATH as the path
    # (with an optional value argparse took it for the format and refused it).
    p.add_argument(
        "--payload",
        action="store_true",
        help="show each payload, as text with control bytes escaped (with --json: base64)",
    )
    p.add_argument(
        "--payload-format",
        choices=("text", "hex", "base64"),
        metavar="{text,hex,base64}",
        help="show each payload in this form (implies --payload; with --json always base64)",
    )
    p.add_argument(
        "--all", action="store_true", help="also the dead letters redriven already (still on disk)"
    )
    p.set_defaults(func=cmd_dead_letters)

    p = sub.add_parser(
        "redrive",
        help="put dead letters back into a queue as new items, exactly once",
        description="Put the selected dead letters' payloads into the target queue as new items and "
        "take them out of the dead-letter queue; an interrupted redrive run again neither loses "
        "nor duplicates one.  Dead letters not selected stay.",
    )
    p.add_argument("path", help="the dead-letter queue's directory")
    p.add_argument("--to", required=True, metavar="PATH", help="the queue to put them into")
    p.add_argument("--to-name", help="which queue in --to, where that directory holds several")
    _filters(p)
    p.set_defaults(func=cmd_redrive)
