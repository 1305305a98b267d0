"""The reader core alone: delivery.ReaderCore over an in-memory log, no queue, no files, no threads.

What the core promises through its protocol (take, commit, abort, release, settle, requeue,
on_put, join/leave), checked without anything above or below it.
"""

from __future__ import annotations

import threading

import pytest

from journaled.config import ReaderConfig
from journaled.core.readercore import ITEM_OVERHEAD, ReaderCore
from journaled.errors import UnknownRead
from journaled.format.record import PUT_OVERHEAD, Put
from journaled.format.smallfiles import CheckpointData
from journaled.item import Item
from journaled.log.journal import Cursor


class MemoryLog:
    """A LogSource holding PUT records in a list (record k has id k + 1 at offset k)."""

    def __init__(self, payloads: list[bytes]) -> None:
        self.records = [Put(k, PUT_OVERHEAD + len(p), k + 1, 1000, 0, p) for k, p in enumerate(payloads)]
        self.reads = 0

    @property
    def next_id(self) -> int:
        return len(self.records) + 1

    def locate(self, item_id: int, hint: Cursor | None = None) -> Cursor:
        return Cursor(0, item_id - 1, item_id)

    def read(
        self, cursor: Cursor, max_bytes: int = 1 << 20, max_items: int = 1 << 30
    ) -> tuple[list[Put], Cursor]:
        self.reads += 1
        out: list[Put] = []
        k, used = cursor.next_id - 1, 0
        while k < len(self.records) and len(out) < max_items and (not out or used < max_bytes):
            out.append(self.records[k])
            used += len(self.records[k].payload)
            k += 1
        return out, Cursor(0, k, k + 1)

    def hint(self, item_id: int) -> tuple[int, int]:
        return 0, 0

    def bytes_from(self, item_id: int, hint_ms: int = 0, hint_offset: int = 0) -> int:
        return sum(r.size for r in self.records[item_id - 1 :])

    def file_created_s(self, item_id: int) -> float:
        return 1.0


class Woken:
    def __init__(self) -> None:
        self.item: Item | None = None

    def wake(self) -> None:
        pass


def core_over(
    payloads: list[bytes], head: int = 1, **config: object
) -> tuple[ReaderCore, MemoryLog, list[str]]:
    log = MemoryLog(payloads)
    calls: list[str] = []
    core = ReaderCore(
        "r",
        ReaderConfig(**config),
        CheckpointData(head),
        threading.Lock(),
        log,  # type: ignore[arg-type]
        head_moved=lambda: calls.append("head_moved"),
        wake_engine=lambda: calls.append("wake"),
    )
    return core, log, calls


def test_the_core_reads_its_backlog_from_the_log_in_id_order():
    core, log, _ = core_over([b"a", b"b", b"c"])
    assert [core.take().data for _ in range(3)] == [b"a", b"b", b"c"]  # type: ignore[union-attr]
    assert core.take() is None and log.reads >= 1


def test_commit_in_order_moves_the_head_and_tells_the_layer_above():
    core, _, calls = core_over([b"a", b"b"])
    first = core.take()
    core.commit(first)  # type: ignore[arg-type]
    assert core.head == 2 and calls.count("head_moved") == 1


def test_out_of_order_commits_wait_in_done_until_the_gap_fills():
    core, _, _ = core_over([b"a", b"b", b"c"])
    a, b, c = core.take(), core.take(), core.take()
    core.commit(c)  # type: ignore[arg-type]
    core.commit(b)  # type: ignore[arg-type]
    assert core.head == 1 and core.done == {2, 3}
    core.commit(a)  # type: ignore[arg-type]
    assert core.head == 4 and core.done == set()
    assert core.checkpoint_state().head == 4


def test_abort_returns_the_item_to_the_head_as_a_new_delivery_with_one_more_error():
    core, _, _ = core_over([b"a", b"b"])
    first = core.take()
    core.abort(first)  # type: ignore[arg-type]
    again = core.take()
    assert again is not first and (again.id, again.error_count) == (1, 1)  # type: ignore[union-attr]
    with pytest.raises(UnknownRead):
        core.commit(first)  # type: ignore[arg-type]  # the old handle names a finished delivery
    core.commit(again)  # type: ignore[arg-type]


def test_release_gives_the_item_back_without_counting_an_error():
    core, _, _ = core_over([b"a"])
    first = core.take()
    core.release(first)  # type: ignore[arg-type]
    again = core.take()
    assert (again.id, again.error_count) == (1, 0) and again is not first  # type: ignore[union-attr]


def test_a_bare_id_names_whatever_read_of_it_is_open():
    core, _, _ = core_over([b"a"])
    core.take()
    core.commit(1)
    assert core.head == 2


def test_items_put_are_handed_to_waiters_in_the_order_they_joined():
    core, _, _ = core_over([])
    w1, w2 = Woken(), Woken()
    core.join(w1)
    core.join(w2)
    items = [Item(1, b"x", 1.0), Item(2, b"y", 1.0)]
    core.on_put(items, 2)
    assert (w1.item.data, w2.item.data) == (b"x", b"y")  # type: ignore[union-attr]
    assert not core.waiters and set(core.open) == {1, 2}


def test_reaching_max_errors_sends_the_item_to_the_dead_letter_sink_not_the_head():
    sink: list[Item] = []
    core, _, calls = core_over([b"poison", b"next"], max_errors=1, dead_letter=sink.append)
    core.abort(core.take())  # type: ignore[arg-type]
    assert [i.data for i, _s in core.disposing.values()] == [b"poison"] and "wake" in calls
    assert core.take().data == b"next"  # type: ignore[union-attr]


def test_memory_stays_within_max_memory_and_the_rest_is_read_back():
    core, log, _ = core_over([], max_memory=10 + 2 * ITEM_OVERHEAD)  # two items, and their overhead
    core.on_put([Item(1, b"12345", 1.0), Item(2, b"12345", 1.0), Item(3, b"12345", 1.0)], 15)
    assert core.charged() <= 10 + 2 * ITEM_OVERHEAD and core.load_id == 3  # item 3 stays on disk only
    log.records = [Put(k, PUT_OVERHEAD + 5, k + 1, 1000, 0, b"12345") for k in range(3)]
    assert [core.take().id for _ in range(3)] == [1, 2, 3]  # type: ignore[union-attr]
