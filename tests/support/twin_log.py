"""A fake journal and the readings that compare two reader cores: the reference
(:class:`~journaled.core.readercore.ReaderCore`) and its compiled twin
(``journaled.core.twin.CompiledReaderCore``), driven with the same calls.

:class:`TwinLog` is a :class:`~journaled.core.readbehind.LogSource` over records in a list (record
*k* holds id *k + 1*), grown by :meth:`TwinLog.append` from the items a put hands the cores, so
what a core reads back from it equals what it was given.  :func:`state_of` is everything a core
shows (the attributes its docstring lists, its counters, its stats figures and its checkpoint
encoded as on disk); two cores that took the same calls must show the same.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from journaled.config import ReaderConfig
from journaled.core.readercore import ReaderCore
from journaled.format.metadata import Meta
from journaled.format.record import PUT_OVERHEAD, Put, PutX
from journaled.format.smallfiles import COUNT_FIELDS, CheckpointData, encode_checkpoint
from journaled.item import Item, MetaItem
from journaled.log.journal import Cursor

#: The file every record is in (a hint's ``ms``), so a checkpoint carries a real-looking hint.
FILE_MS = 1_700_000_000_000


def window(records: list[Put], start: int, max_bytes: int, max_items: int) -> list[Put]:
    """``records[start:]`` as a journal read gives them: at most ``max_items``, and records while
    the payload so far is under ``max_bytes`` (at least one when any is left)."""
    out: list[Put] = []
    k, used = start, 0
    while k < len(records) and len(out) < max_items and (not out or used < max_bytes):
        out.append(records[k])
        used += len(records[k].payload)
        k += 1
    return out


class TwinLog:
    """A LogSource holding PUT/PUTX records in a list (record k has id k + 1 at offset 1000 k)."""

    def __init__(self) -> None:
        self.records: list[Put] = []
        self.reads = 0

    @property
    def next_id(self) -> int:
        return len(self.records) + 1

    def append(self, items: Iterable[Item]) -> None:
        """The records of ``items`` (ids from :attr:`next_id` on, as a put writes them)."""
        for it in items:
            assert it.id == self.next_id, "items are appended in id order"
            add_ms = round(it.add_time * 1000)
            expire_ms = 0 if it.expire_at is None else round(it.expire_at * 1000)
            offset = 1000 * len(self.records)
            data = bytes(it.data)
            if type(it) is MetaItem:
                rec: Put = PutX(
                    offset, PUT_OVERHEAD + 40 + len(data), it.id, add_ms, expire_ms, data, it.stored
                )
            else:
                rec = Put(offset, PUT_OVERHEAD + len(data), it.id, add_ms, expire_ms, data)
            self.records.append(rec)

    def first_id(self) -> int:
        return 1

    def locate(self, item_id: int, hint: Cursor | None = None) -> Cursor:
        return Cursor(FILE_MS, 1000 * (item_id - 1), item_id)

    def locate_time(self, ms: int) -> int:
        return next((r.id for r in self.records if r.add_ms >= ms), self.next_id)

    def read(
        self, cursor: Cursor, max_bytes: int = 1 << 20, max_items: int = 1 << 30
    ) -> tuple[list[Put], Cursor]:
        self.reads += 1
        out = window(self.records, cursor.next_id - 1, max_bytes, max_items)
        k = cursor.next_id - 1 + len(out)
        return out, Cursor(FILE_MS, 1000 * k, k + 1)

    def hint(self, item_id: int) -> tuple[int, int]:
        return FILE_MS, 1000 * (item_id - 1)

    def bytes_from(self, item_id: int, hint_ms: int = 0, hint_offset: int = 0) -> int:
        return sum(r.size for r in self.records[max(item_id - 1, 0) :])

    def file_created_s(self, item_id: int) -> float:
        return FILE_MS / 1000


def make_items(
    first_id: int,
    payloads: list[bytes],
    add_ms: int,
    expire_ms: int | None = None,
    not_before_ms: int | None = None,
    keys: list[bytes | None] | None = None,
) -> list[Item]:
    """Fresh items of one put, as the queue builds them: plain, or (with a not-before or keys)
    :class:`MetaItem` for each item that carries metadata."""
    out: list[Item] = []
    expire_at = None if expire_ms is None else expire_ms / 1000.0
    for k, data in enumerate(payloads):
        key = None if keys is None else keys[k]
        meta = Meta(not_before_ms=not_before_ms or 0, key=key)
        if meta.empty:
            out.append(Item(first_id + k, data, add_ms / 1000.0, expire_at))
        else:
            out.append(MetaItem(first_id + k, data, add_ms / 1000.0, expire_at, 0, meta))
    return out


class Woken:
    """A blocked ``get`` stand-in: keeps what the core hands it, counts its wake-ups."""

    def __init__(self) -> None:
        self.items: list[Item] = []
        self.woken = 0

    def deliver(self, item: Item) -> None:
        self.items.append(item)

    def wake(self) -> None:
        self.woken += 1


class Calls:
    """The upward calls one core made (``head_moved``, ``wake_engine``), counted."""

    def __init__(self) -> None:
        self.head_moved = 0
        self.wake_engine = 0

    def on_head_moved(self) -> None:
        self.head_moved += 1

    def on_wake_engine(self) -> None:
        self.wake_engine += 1


def new_core(
    cls: type[ReaderCore],
    config: ReaderConfig,
    state: CheckpointData,
    log: TwinLog,
    calls: Calls,
    name: str = "r",
) -> ReaderCore:
    """A core of class ``cls`` over ``log``, its upward calls counted in ``calls``."""
    return cls(
        name,
        config,
        state,
        threading.Lock(),
        log,  # type: ignore[arg-type]  # a LogSource in all but name
        head_moved=calls.on_head_moved,
        wake_engine=calls.on_wake_engine,
    )


def item_fields(item: Any) -> tuple[Any, ...] | None:
    """What a consumer sees of an item (None for None)."""
    if item is None:
        return None
    return (
        type(item).__name__,
        item.id,
        bytes(item.data),
        item.add_time,
        item.expire_at,
        item.error_count,
        item.not_before,
        item.key,
    )


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    """What a call returned, or the type of the exception it raised (the exception too)."""
    try:
        return "ok", fn(*args)
    except Exception as exc:  # noqa: BLE001 - the exception is what is compared
        return "raised", exc


def state_of(core: ReaderCore, *, stats: bool = True) -> dict[str, Any]:
    """Everything ``core`` shows, in plain values.  ``stats`` also asks ``backlog_payload()``,
    which may make the backlog estimate exact (so both twins must be asked alike)."""
    parked = core.parked
    state: dict[str, Any] = {
        "head": core.head,
        "done": sorted(core.done),
        "errors": dict(sorted(core.errors.items())),
        "mem": [item_fields(it) for it in core.mem],
        "mem_bytes": core.mem_bytes,
        "open": {i: item_fields(it) for i, it in core.open.items()},
        "opened_at": list(core.opened_at.items()),
        "load_id": core.load_id,
        "load_cursor": core.load_cursor,
        "parked": sorted((i, item_fields(it)) for i, it in parked.items()),
        "next_due": parked.next_due(),
        "disposing": {
            i: (item_fields(letter), letter.kind, letter.reason, letter.reader, sink)
            for i, (letter, sink) in sorted(core.disposing.items())
        },
        "waiters": len(core.waiters),
        "saw_expiry": core.saw_expiry,
        "backlog_bytes": core.backlog_bytes,
        "backlog_exact": core.backlog_exact,
        "dirty": core.dirty,
        "closed": core.closed,
        "counters": {name: getattr(core, name) for name in COUNT_FIELDS},
        "charged": core.charged(),
        "backlog_items": core.backlog_items(),
        "checkpoint": encode_checkpoint(core.checkpoint_state()),
    }
    if stats:
        state["backlog_payload"] = core.backlog_payload()
        state["backlog_bytes_after"] = (core.backlog_bytes, core.backlog_exact)
    return state
