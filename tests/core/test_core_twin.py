"""The compiled reader core is the reference reader core, call for call (issue 26, point 1).

``journaled.core.twin.CompiledReaderCore`` runs ``take()``, ``commit(item)`` and
``on_put(items, nbytes)`` in C for the common case and hands every other case to
:class:`~journaled.core.readercore.ReaderCore`'s own method.  Here a reference core and a compiled
core, each over its own fake journal grown alike (support/twin_log.py), take the same random
calls: puts (plain items, with an expiry, not yet due), deliveries, every way an open read ends
(the item handed out, a stale one, a bare id, an unknown id), delays on a fake clock, expiry,
open-read timeouts, discards, seeks, read-behind, disposal to sinks, blocked gets and reopening
from a checkpoint.  After every call both must show the same: what the call returned or raised,
every attribute the reference's docstring lists, every counter, the stats figures, the
checkpoint as encoded on disk, the upward calls, and what each blocked get was handed.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from journaled.config import ReaderConfig
from journaled.core import readercore, retry, twin
from journaled.core.readercore import ITEM_OVERHEAD, ReaderCore
from journaled.deadletter import DeadLetter
from journaled.errors import UnknownRead
from journaled.format.smallfiles import CheckpointData, encode_checkpoint
from journaled.item import Item
from support.clock import FakeClock
from support.twin_log import Calls, TwinLog, Woken, item_fields, make_items, new_core, outcome, state_of

CompiledReaderCore = twin.CompiledReaderCore

pytestmark = pytest.mark.skipif(
    CompiledReaderCore is None,
    reason="no compiled reader core (journaled.core._coreops not built, or JOURNALED_PURE_PYTHON=1)",
)

#: A whole second, so the item times built from it are exact milliseconds, as a put stores them.
WALL0 = 1_700_000_000.0


class ClockSlot:
    """The ``time`` the core modules read while these tests run: the current example's clock."""

    def __init__(self) -> None:
        self.clock = FakeClock(mono=1000.0)

    def time(self) -> float:
        return self.clock.time()

    def monotonic(self) -> float:
        return self.clock.monotonic()


SLOT = ClockSlot()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """A fresh fake clock in the slot, and the slot in every module of the core that reads time."""
    SLOT.clock = FakeClock(mono=1000.0)
    SLOT.clock.wall = WALL0
    for module in (readercore, retry):
        monkeypatch.setattr(module, "time", SLOT)
    return SLOT.clock


def sink(item: Item) -> None:
    """An expiry / dead-letter destination (the engine would call it; nothing here does)."""


def payload(item_id: int, size: int) -> bytes:
    return (b"%d." % item_id * (size // 2 + 1))[:size]


SMALL = 3 * ITEM_OVERHEAD + 300  # a few items in memory: read-behind happens all the time
MEDIUM = 8 * ITEM_OVERHEAD + 1000

memories = st.sampled_from([SMALL, MEDIUM, 16 * 1024 * 1024])
configs = st.one_of(
    # what the compiled paths take on themselves: no expiry, no open-read timeout
    st.builds(ReaderConfig, max_memory=memories, max_errors=st.sampled_from([None, 3])),
    st.builds(
        ReaderConfig, max_memory=memories, max_errors=st.sampled_from([None, 3]), dead_letter=st.just(sink)
    ),
    # and every policy, each on or off
    st.builds(
        ReaderConfig,
        max_memory=memories,
        max_age=st.sampled_from([None, None, 20.0]),
        expire_to=st.sampled_from([None, sink]),
        open_read_timeout=st.sampled_from([None, None, 10.0]),
        max_errors=st.sampled_from([None, None, 1, 2, 4]),
        dead_letter=st.sampled_from([None, sink]),
        retry_delay=st.sampled_from([None, None, 1.0]),
        retry_delay_max=st.sampled_from([None, 4.0]),
    ),
)


def same_outcome(got: tuple[str, Any], want: tuple[str, Any]) -> None:
    """The twin returned what the reference returned, or raised the same type of exception."""
    if want[0] == "raised":
        assert got[0] == "raised", f"the reference raised {want[1]!r}, the twin returned {got[1]!r}"
        assert type(got[1]) is type(want[1]), f"the twin raised {got[1]!r}, the reference {want[1]!r}"
    else:
        assert got[0] == "ok", f"the twin raised {got[1]!r}, the reference returned {want[1]!r}"
        value, expected = got[1], want[1]
        if isinstance(expected, Item) or expected is None:
            assert item_fields(value) == item_fields(expected)
        else:
            assert value == expected


class TwinMachine(RuleBasedStateMachine):
    """A reference core and a compiled core taking the same calls."""

    def __init__(self) -> None:
        super().__init__()
        SLOT.clock = self.clock = FakeClock(mono=1000.0)
        self.clock.wall = WALL0
        self.logs = (TwinLog(), TwinLog())
        self.calls = (Calls(), Calls())
        self.cores: tuple[ReaderCore, ReaderCore] | None = None
        self.config = ReaderConfig()
        self.handed: list[tuple[Item, Item]] = []  # every delivery, (reference's, twin's)
        self.letters: list[tuple[DeadLetter, DeadLetter]] = []  # every disposal seen
        self.waiters: list[tuple[Woken, Woken]] = []  # in line, or served and gone
        self.seen: dict[int, int] = {}  # deliveries already taken from each waiter pair

    # ------------------------------------------------------------------ the two cores
    @initialize(config=configs, backlog=st.lists(st.integers(0, 300), max_size=12), head=st.integers(1, 4))
    def start(self, config: ReaderConfig, backlog: list[int], head: int) -> None:
        """Cores over a journal that may already hold a backlog (read back from disk)."""
        self.config = config
        self.grow(backlog, None, None, False, call=False)
        head = min(head, self.logs[0].next_id)
        self.cores = self.build(CheckpointData(head))

    def build(self, state_ref: CheckpointData, state_twin: CheckpointData | None = None) -> Any:
        assert CompiledReaderCore is not None
        return (
            new_core(ReaderCore, self.config, state_ref, self.logs[0], self.calls[0]),
            new_core(CompiledReaderCore, self.config, state_twin or state_ref, self.logs[1], self.calls[1]),
        )

    def both(self, method: str, *args: Any) -> tuple[str, Any]:
        """Call ``method`` on both cores; their outcomes must agree.  The reference's is returned."""
        assert self.cores is not None
        ref, tw = self.cores
        want = outcome(getattr(ref, method), *args)
        got = outcome(getattr(tw, method), *args)
        same_outcome(got, want)
        return want if want[0] == "raised" else ("ok", (want[1], got[1]))

    def grow(
        self, sizes: list[int], expire: int | None, not_before: int | None, keyed: bool, call: bool = True
    ) -> None:
        """One put of items of ``sizes``: in both journals, then (``call``) to both cores."""
        if not sizes:
            return
        first = self.logs[0].next_id
        now_ms = round(self.clock.wall * 1000)
        payloads = [payload(first + k, n) for k, n in enumerate(sizes)]
        keys = [b"k%d" % k if k % 2 else None for k in range(len(sizes))] if keyed else None
        args = (
            now_ms,
            None if expire is None else max(1, now_ms + expire),
            None if not_before is None else now_ms + not_before,
            keys,
        )
        batches = [make_items(first, payloads, *args) for _ in range(2)]
        for log, items in zip(self.logs, batches):
            log.append(items)
        if call:
            assert self.cores is not None
            ref, tw = self.cores
            same_outcome(
                outcome(tw.on_put, batches[1], sum(sizes)), outcome(ref.on_put, batches[0], sum(sizes))
            )

    # ------------------------------------------------------------------ choosing a read
    def pick(self, data: st.DataObject, kind: str) -> tuple[Any, Any]:
        """What names a read to end, for each core: the item handed out (``open``), an item
        whose read has ended (``stale``), a bare id of an open read (``id``), or any id."""
        assert self.cores is not None
        ref = self.cores[0]
        open_pairs = [p for p in self.handed if ref.open.get(p[0].id) is p[0]]
        stale = [p for p in self.handed if ref.open.get(p[0].id) is not p[0]]
        if kind == "open" and open_pairs:
            return data.draw(st.sampled_from(open_pairs))
        if kind == "stale" and stale:
            return data.draw(st.sampled_from(stale))
        if kind == "id" and open_pairs:
            item_id = data.draw(st.sampled_from(open_pairs))[0].id
            return item_id, item_id
        item_id = data.draw(st.integers(0, self.logs[0].next_id + 2))
        return item_id, item_id

    def end_read(self, method: str, data: st.DataObject, kind: str, *extra: Any) -> None:
        assert self.cores is not None
        ref, tw = self.cores
        a, b = self.pick(data, kind)
        same_outcome(outcome(getattr(tw, method), b, *extra), outcome(getattr(ref, method), a, *extra))

    # ------------------------------------------------------------------ rules
    @rule(
        sizes=st.lists(st.integers(0, 300), min_size=1, max_size=5),
        expire=st.sampled_from([None, None, None, None, -1000, 500, 5000, 60_000]),
        not_before=st.sampled_from([None, None, None, None, -1000, 300, 3000, 20_000]),
        keyed=st.sampled_from([False, False, True]),
    )
    def put(self, sizes: list[int], expire: int | None, not_before: int | None, keyed: bool) -> None:
        self.grow(sizes, expire, not_before, keyed)

    @rule(sizes=st.lists(st.integers(0, 120), min_size=1, max_size=8))
    def put_plain(self, sizes: list[int]) -> None:
        """The common put: plain items, no expiry, no delay."""
        self.grow(sizes, None, None, False)

    @rule(first=st.booleans())
    def take(self, first: bool) -> None:
        result = self.both("take_if_first" if first else "take")
        if result[0] == "ok" and result[1][0] is not None:
            self.handed.append(result[1])

    @rule(
        then=st.sampled_from(["keep", "commit", "commit", "commit", "abort", "release", "reject"]),
        delay=st.sampled_from([None, None, 0, 2.0]),
    )
    def consume(self, then: str, delay: float | None) -> None:
        """A consumer gets an item and, most of the time, ends its read at once."""
        result = self.both("take")
        if result[0] != "ok" or result[1][0] is None:
            return
        self.handed.append(result[1])
        if then != "keep":
            extra = {"abort": (delay,), "reject": ("bad",)}.get(then, ())
            self.both_each(then, result[1], *extra)

    @rule(data=st.data(), kind=st.sampled_from(["open", "open", "stale", "id", "any"]))
    def commit(self, data: st.DataObject, kind: str) -> None:
        self.end_read("commit", data, kind)

    @rule(
        data=st.data(),
        kind=st.sampled_from(["open", "stale", "id", "any"]),
        delay=st.sampled_from([None, 0, 0.5, 3.0]),
    )
    def abort(self, data: st.DataObject, kind: str, delay: float | None) -> None:
        self.end_read("abort", data, kind, delay)

    @rule(data=st.data(), kind=st.sampled_from(["open", "stale", "id", "any"]))
    def release(self, data: st.DataObject, kind: str) -> None:
        self.end_read("release", data, kind)

    @rule(data=st.data(), kind=st.sampled_from(["open", "stale", "any"]))
    def reject(self, data: st.DataObject, kind: str) -> None:
        self.end_read("reject", data, kind, "bad")

    @rule(data=st.data())
    def release_id(self, data: st.DataObject) -> None:
        self.both("release_id", self.pick(data, "id")[0])

    @rule(seconds=st.sampled_from([0.001, 0.3, 1.0, 5.0, 15.0, 30.0]), wall_only=st.booleans())
    def advance(self, seconds: float, wall_only: bool) -> None:
        """Time passes (or only the wall clock steps: forward, or back)."""
        if wall_only:
            self.clock.wall += seconds if seconds < 10 else -seconds
        else:
            self.clock.advance(seconds)

    @rule(given=st.booleans())
    def release_due(self, given: bool) -> None:
        self.both("release_due", self.clock.mono if given else None)

    @rule()
    def time_out_reads(self) -> None:
        self.both("time_out_reads", self.clock.mono)

    @rule()
    def expire_head(self) -> None:
        self.both("expire_head", self.clock.wall)

    @rule()
    def expire_in_memory(self) -> None:
        self.both("expire_in_memory", self.clock.wall)

    @rule(limit=st.integers(0, 4))
    def discard_waiting(self, limit: int) -> None:
        self.both("discard_waiting", limit)

    @rule(data=st.data())
    def end_disposal(self, data: st.DataObject) -> None:
        """A sink has an item bound for it (or one whose disposal a seek forgot, or ended)."""
        assert self.cores is not None
        ref, tw = self.cores
        for i in ref.disposing:
            self.letters.append((ref.disposing[i][0], tw.disposing[i][0]))
        if self.letters:
            a, b = data.draw(st.sampled_from(self.letters))
            same_outcome(outcome(tw.end_disposal, b), outcome(ref.end_disposal, a))

    @rule(data=st.data())
    def reset_to(self, data: st.DataObject) -> None:
        self.both("reset_to", data.draw(st.integers(1, self.logs[0].next_id)))

    @rule()
    def join(self) -> None:
        pair = (Woken(), Woken())
        self.waiters.append(pair)
        self.both_each("join", pair)

    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        if self.waiters:
            self.both_each("leave", data.draw(st.sampled_from(self.waiters)))

    def both_each(self, method: str, pair: tuple[Any, Any], *extra: Any) -> None:
        """Call ``method`` on each core with its own of ``pair``; their outcomes must agree."""
        assert self.cores is not None
        ref, tw = self.cores
        same_outcome(
            outcome(getattr(tw, method), pair[1], *extra), outcome(getattr(ref, method), pair[0], *extra)
        )

    @rule()
    def checkpoint(self) -> None:
        """A checkpoint is taken and written."""
        assert self.cores is not None
        ref, tw = self.cores
        assert encode_checkpoint(tw.checkpoint_state()) == encode_checkpoint(ref.checkpoint_state())
        self.both("mark_clean")

    @rule(config=configs)
    def reconfigure(self, config: ReaderConfig) -> None:
        self.config = config
        self.both("reconfigure", config)

    @rule(wake=st.booleans())
    def close(self, wake: bool) -> None:
        self.both("close", wake)

    @rule()
    def reopen(self) -> None:
        """The queue is closed and opened again: fresh cores from each one's checkpoint."""
        assert self.cores is not None
        ref, tw = self.cores
        states = ref.checkpoint_state(), tw.checkpoint_state()
        assert encode_checkpoint(states[1]) == encode_checkpoint(states[0])
        self.cores = self.build(*states)
        self.waiters.clear()
        self.seen.clear()

    # ------------------------------------------------------------------ after every call
    @invariant()
    def the_twins_agree(self) -> None:
        if self.cores is None:
            return
        ref, tw = self.cores
        assert state_of(tw) == state_of(ref)
        assert vars(self.calls[1]) == vars(self.calls[0])
        for n, (a, b) in enumerate(self.waiters):
            assert [item_fields(i) for i in b.items] == [item_fields(i) for i in a.items]
            assert b.woken == a.woken
            self.handed.extend(zip(a.items[self.seen.get(n, 0) :], b.items[self.seen.get(n, 0) :]))
            self.seen[n] = len(a.items)
        # the open reads are the very objects handed out, on both sides alike
        for a, b in self.handed:
            assert (tw.open.get(b.id) is b) == (ref.open.get(a.id) is a)


def test_the_compiled_core_takes_every_call_as_the_reference_does(clock: FakeClock) -> None:
    run_state_machine_as_test(
        TwinMachine,
        settings=settings(
            max_examples=150,
            stateful_step_count=60,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


# ----------------------------------------------------------------------------- the fast paths
def twin_pair(payloads: list[bytes], **config: Any) -> tuple[ReaderCore, ReaderCore, tuple[Calls, Calls]]:
    """A reference and a compiled core over the same journal of ``payloads``, nothing read yet."""
    assert CompiledReaderCore is not None
    cfg = ReaderConfig(**config)
    calls = (Calls(), Calls())
    cores = []
    for cls, c in zip((ReaderCore, CompiledReaderCore), calls):
        log = TwinLog()
        log.append(make_items(1, payloads, round(WALL0 * 1000)))
        cores.append(new_core(cls, cfg, CheckpointData(1), log, c))
    return cores[0], cores[1], calls


def put_both(ref: ReaderCore, tw: ReaderCore, payloads: list[bytes]) -> None:
    for core in (ref, tw):
        items = make_items(core.journal.next_id, payloads, round(WALL0 * 1000))
        core.journal.append(items)  # type: ignore[attr-defined]
        core.on_put(items, sum(map(len, payloads)))


def test_the_fast_take_and_commit_in_order_match_the_reference(clock: FakeClock) -> None:
    ref, tw, calls = twin_pair([])
    put_both(ref, tw, [b"a", b"bb", b"ccc", b""])
    for _ in range(4):
        a, b = ref.take(), tw.take()
        assert item_fields(b) == item_fields(a) and tw.open[b.id] is b  # type: ignore[union-attr]
        ref.commit(a)  # type: ignore[arg-type]
        tw.commit(b)  # type: ignore[arg-type]
        assert state_of(tw) == state_of(ref)
    assert ref.take() is None and tw.take() is None
    assert vars(calls[1]) == vars(calls[0]) and tw.head == 5 and tw.committed == 4


def test_the_fast_commits_out_of_order_and_by_id_match_the_reference(clock: FakeClock) -> None:
    ref, tw, calls = twin_pair([b"x" * n for n in range(6)])
    got = [(ref.take(), tw.take()) for _ in range(6)]
    for k in (3, 1, 0, 5):
        ref.commit(got[k][0])  # type: ignore[arg-type]
        tw.commit(got[k][1])  # type: ignore[arg-type]
        assert state_of(tw) == state_of(ref)
    ref.commit(3)
    tw.commit(3)
    assert state_of(tw) == state_of(ref) and (tw.head, sorted(tw.done)) == (5, [6])
    assert vars(calls[1]) == vars(calls[0])


def test_the_fast_paths_refuse_a_read_that_is_not_open_as_the_reference_does(clock: FakeClock) -> None:
    ref, tw, _ = twin_pair([b"a", b"b"])
    a, b = ref.take(), tw.take()
    ref.commit(a)  # type: ignore[arg-type]
    tw.commit(b)  # type: ignore[arg-type]
    for bad_ref, bad_tw in ((a, b), (1, 1), (99, 99)):
        with pytest.raises(UnknownRead) as want:
            ref.commit(bad_ref)  # type: ignore[arg-type]
        with pytest.raises(UnknownRead) as got:
            tw.commit(bad_tw)  # type: ignore[arg-type]
        assert str(got.value) == str(want.value)
    assert state_of(tw) == state_of(ref)


def test_a_released_item_is_a_new_delivery_the_old_handle_cannot_commit(clock: FakeClock) -> None:
    ref, tw, _ = twin_pair([b"a"])
    a, b = ref.take(), tw.take()
    ref.release(a)  # type: ignore[arg-type]
    tw.release(b)  # type: ignore[arg-type]
    a2, b2 = ref.take(), tw.take()
    assert b2 is not b and item_fields(b2) == item_fields(a2)
    with pytest.raises(UnknownRead):
        tw.commit(b)  # type: ignore[arg-type]
    tw.commit(b2)  # type: ignore[arg-type]
    ref.commit(a2)  # type: ignore[arg-type]
    assert state_of(tw) == state_of(ref)


def test_a_put_within_max_memory_goes_to_memory_and_past_it_to_read_behind(clock: FakeClock) -> None:
    ref, tw, _ = twin_pair([], max_memory=2 * ITEM_OVERHEAD + 10)
    put_both(ref, tw, [b"12345"])
    assert state_of(tw) == state_of(ref) and tw.load_id is None
    put_both(ref, tw, [b"12345", b"12345", b"12345"])
    assert state_of(tw) == state_of(ref) and tw.load_id == 3
    assert [item_fields(ref.take()) for _ in range(5)] == [item_fields(tw.take()) for _ in range(5)]
    assert state_of(tw) == state_of(ref)


def test_a_put_hands_its_items_to_blocked_gets_in_line_order(clock: FakeClock) -> None:
    ref, tw, _ = twin_pair([])
    waiters = [(Woken(), Woken()) for _ in range(3)]
    for a, b in waiters:
        ref.join(a)
        tw.join(b)
    put_both(ref, tw, [b"p", b"q"])
    for a, b in waiters:
        assert [item_fields(i) for i in b.items] == [item_fields(i) for i in a.items]
        assert all(tw.open[i.id] is i for i in b.items)
    assert state_of(tw) == state_of(ref) and len(tw.waiters) == 1


def test_the_compiled_core_is_what_the_queue_uses(clock: FakeClock) -> None:
    assert twin.core_class() is CompiledReaderCore
    assert issubclass(CompiledReaderCore, ReaderCore)  # type: ignore[arg-type]
    for name in ("take", "commit", "on_put"):
        assert getattr(CompiledReaderCore, name) is not getattr(ReaderCore, name), name


def test_the_checkpoint_after_many_fast_commits_is_the_references_byte_for_byte(clock: FakeClock) -> None:
    ref, tw, _ = twin_pair([payload(i, i % 7) for i in range(1, 60)])
    order = sorted(range(59), key=lambda k: (k * 37) % 59)
    got = [(ref.take(), tw.take()) for _ in range(59)]
    for k in order[:40]:
        ref.commit(got[k][0])  # type: ignore[arg-type]
        tw.commit(got[k][1])  # type: ignore[arg-type]
    assert encode_checkpoint(tw.checkpoint_state()) == encode_checkpoint(ref.checkpoint_state())
    assert math.isclose(tw.backlog_payload(), ref.backlog_payload())
