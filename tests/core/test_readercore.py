"""The reader core alone: ReaderCore over an in-memory log, no queue, no files, no threads.

What the core promises through its protocol (on_put, take, join/leave, commit, abort, reject,
release, the upkeep methods, reset_to, the checkpoint and closing calls), checked without
anything above or below it.
"""

from __future__ import annotations

import threading

import pytest

from journaled.config import ReaderConfig
from journaled.core import retry
from journaled.core.readercore import ITEM_OVERHEAD, ReaderCore
from journaled.errors import UnknownRead
from journaled.format.record import PUT_OVERHEAD, Put
from journaled.format.smallfiles import CheckpointData
from journaled.item import Item
from journaled.log.journal import Cursor


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
        out = window(self.records, cursor.next_id - 1, max_bytes, max_items)
        k = cursor.next_id - 1 + len(out)
        return out, Cursor(0, k, k + 1)

    def hint(self, item_id: int) -> tuple[int, int]:
        return 0, 0

    compressed = False  # plain PUT records: their sizes bound their payload

    def bytes_from(self, item_id: int, hint_ms: int = 0, hint_offset: int = 0) -> int:
        return sum(r.size for r in self.records[item_id - 1 :])

    def file_created_s(self, item_id: int) -> float:
        return 1.0


class Woken:
    """A blocked ``get`` stand-in: keeps what the core hands it."""

    def __init__(self) -> None:
        self.item: Item | None = None
        self.woken = 0

    def deliver(self, item: Item) -> None:
        self.item = item

    def wake(self) -> None:
        self.woken += 1


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


# ----------------------------------------------------------------------------- the state methods
class Clock:
    """The clock the cores under test are given (retry.CLOCK when they are made)."""

    def __init__(self) -> None:
        self.wall, self.mono = 1_000_000.0, 1000.0

    def time(self) -> float:
        return self.wall

    def monotonic(self) -> float:
        return self.mono


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(retry, "CLOCK", c)  # the clock every core made from now on is given
    return c


def test_seek_resets_open_reads_and_memory():
    core, _, calls = core_over([b"a", b"b", b"c", b"d"], retry_delay=60.0)
    a, b = core.take(), core.take()
    core.abort(b)  # type: ignore[arg-type]  # parked for a minute
    core.commit(core.take())  # type: ignore[arg-type]  # c, out of order
    core.mark_clean()
    core.reset_to(2)
    assert (core.head, core.done, core.errors, core.open, core.parked) == (2, set(), {}, {}, {})
    assert not core.mem and core.load_id == 2 and core.dirty and calls[-1] == "head_moved"
    assert [core.take().data for _ in range(3)] == [b"b", b"c", b"d"]  # type: ignore[union-attr]
    with pytest.raises(UnknownRead):
        core.commit(a)  # type: ignore[arg-type]  # the open read was taken back
    assert core.checkpoint_state().head == 2


def test_seek_serves_the_blocked_gets_from_the_new_head():
    core, _, _ = core_over([b"a", b"b"])
    core.take(), core.take()
    waiter = Woken()
    core.join(waiter)
    core.reset_to(1)
    assert waiter.item is not None and waiter.item.data == b"a" and not core.waiters


def test_a_checkpoint_taken_marks_the_core_clean_until_its_state_changes():
    core, _, _ = core_over([b"a"])
    assert core.dirty  # a new core has a checkpoint to write
    core.mark_clean()
    item = core.take()
    assert not core.dirty  # an open read is not durable state
    core.commit(item)  # type: ignore[arg-type]
    assert core.dirty
    core.mark_clean()
    core.mark_dirty()  # a write failed: write it again
    assert core.dirty


def test_an_abort_with_a_delay_parks_the_item_until_it_is_due(clock: Clock):
    core, _, calls = core_over([b"a", b"b"])
    core.abort(core.take(), delay=5)  # type: ignore[arg-type]
    assert set(core.parked) == {1} and core.errors == {1: 1} and "wake" in calls
    assert core.take().data == b"b"  # type: ignore[union-attr]  # the head is not held back
    assert core.take() is None
    clock.mono += 5
    again = core.take()
    assert (again.id, again.error_count) == (1, 1) and not core.parked  # type: ignore[union-attr]


def test_release_due_hands_due_items_to_waiting_gets(clock: Clock):
    core, _, _ = core_over([b"a"])
    core.abort(core.take(), delay=1)  # type: ignore[arg-type]
    waiter = Woken()
    core.join(waiter)
    assert core.release_due() == 0 and waiter.item is None
    clock.mono += 1
    assert core.release_due() == 1 and waiter.item is not None and waiter.item.error_count == 1


def test_discard_waiting_drops_the_oldest_waiting_items_and_counts_them():
    core, _, _ = core_over([b"a", b"b", b"c"])
    held = core.take()
    assert core.discard_waiting(1) == 1 and core.discarded == 1
    assert core.head == 1 and core.done == {2}  # the open read is left alone
    assert core.discard_waiting(10) == 1 and core.discarded == 2 and core.take() is None
    core.commit(held)  # type: ignore[arg-type]
    assert core.head == 4


def test_a_disposal_ends_when_the_engine_has_handed_the_item_to_its_sink():
    sink: list[Item] = []
    core, _, _ = core_over([b"a"], dead_letter=sink.append)
    core.reject(core.take(), "bad")  # type: ignore[arg-type]
    (letter, to), *_ = core.disposing.values()
    assert to == sink.append and letter.reason == "bad" and core.rejected == 1 and core.head == 1
    core.end_disposal(letter)
    assert not core.disposing and core.head == 2
    core.end_disposal(letter)  # already settled (or forgotten by a seek): nothing happens
    assert core.head == 2


def test_expiry_sweeps_send_expired_items_to_their_sink(clock: Clock):
    core, _, _ = core_over([], max_age=10.0)
    now = clock.wall
    core.on_put([Item(1, b"old", now - 20), Item(2, b"new", now), Item(3, b"old", now - 20)], 9)
    assert core.expire_head(now) == 1  # stops at the first live item
    assert core.expire_in_memory(now) == 1 and core.expired == 2  # wherever it is
    assert [i.id for i in core.mem] == [2] and core.mem_bytes == 3 and core.done == {3}


def test_reads_open_too_long_are_aborted(clock: Clock):
    core, _, _ = core_over([b"a", b"b"], open_read_timeout=30.0)
    first = core.take()
    clock.mono += 20
    second = core.take()
    assert core.time_out_reads(clock.mono + 10) == 1 and core.timed_out == 1
    assert set(core.open) == {second.id} and core.errors == {first.id: 1}  # type: ignore[union-attr]


def test_closing_wakes_blocked_gets_unless_told_not_to():
    core, _, _ = core_over([])
    waiter = Woken()
    core.join(waiter)
    core.close(wake=False)
    assert core.closed and waiter.woken == 0
    core.close()
    assert waiter.woken == 1


def test_a_forked_child_closes_the_core_under_a_fresh_lock_without_waking_the_parents_threads():
    core, _, _ = core_over([])
    waiter = Woken()
    core.join(waiter)
    fresh = threading.Lock()
    core.close_in_child(fresh)
    assert core.closed and core.lock is fresh and waiter.woken == 0


def test_the_backlog_estimate_becomes_exact_once_everything_is_in_memory():
    core, _, _ = core_over([b"aaaa", b"bb"], head=1)
    assert not core.backlog_exact and core.backlog_items() == 2
    core.take()
    assert core.backlog_payload() == 6 and core.backlog_exact
