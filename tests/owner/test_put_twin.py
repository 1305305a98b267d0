"""The plain single put in one C call (owner/fastput.py, owner/_putops.c) against its reference.

A queue's ``_plain_put`` is the compiled ``PlainPut`` where it is built; setting it to None makes
``put`` run the reference path (queue.put -> PutPath.append_locked -> Writer.append_one -> every
core's on_put).  Two queues fed the same puts, one each way, must end in the same state: the same
ids, records, file sizes, sparse index, byte counters, put counters and reader cores.  Whatever the
compiled put declines it must decline with nothing changed.
"""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ready_items, scratch_dir
from journaled import JournaledQueue, JournalIOError, QueueConfig, ReaderConfig
from journaled.owner import fastput

pytestmark = pytest.mark.skipif(
    fastput.describe() != "compiled (C extension)", reason=f"no compiled put here: {fastput.describe()}"
)


def _state(q: JournaledQueue) -> dict[str, object]:
    """Everything a put changes, minus what differs between two queues by nature (file names,
    salts, add times)."""
    state, writer = q.journal.appending_parts()
    cores = {}
    for name in q.readers():
        c = q.reader(name).core
        cores[name] = (
            [it.id for it in c.mem],
            [it.data for it in c.mem],
            c.mem_bytes,
            c.backlog_bytes,
            c.load_id,
            c.head,
        )
    return {
        "next_id": state.next_id,
        "sizes": [jf.size + (len(writer.buf) if jf is state.files[-1] else 0) for jf in state.files],
        "index_ids": [list(jf.index_ids) for jf in state.files],
        "index_offsets": [list(jf.index_offsets) for jf in state.files],
        "appended": writer.appended,
        "put": (q.stats().put, q.stats().bytes_put),
        "cores": cores,
    }


def _pair(
    base: str, config: QueueConfig, readers: dict[str, ReaderConfig]
) -> tuple[JournaledQueue, JournaledQueue]:
    fast = JournaledQueue(base + "/fast", config)
    ref = JournaledQueue(base + "/slow", config)  # a name of the same length: the same header
    ref._plain_put = None  # the reference path
    assert fast._plain_put is not None
    for name, rc in readers.items():
        fast.reader(name, rc)
        ref.reader(name, rc)
    return fast, ref


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=60),
    journal_size=st.sampled_from([4096, 16384, 1 << 20]),
    max_memory=st.sampled_from([2000, 20000, 1 << 20]),
    consume=st.integers(0, 20),
)
def test_the_compiled_put_leaves_the_queue_as_the_reference_does(sizes, journal_size, max_memory, consume):
    with scratch_dir("put-twin-") as base:
        config = QueueConfig(journal_size=journal_size, sync="never")
        fast, ref = _pair(base, config, {"a": ReaderConfig(max_memory=max_memory), "b": ReaderConfig()})
        try:
            for k, n in enumerate(sizes):
                data = bytes([k % 251]) * n
                assert fast.put(data) == ref.put(data)
                if k == consume:  # a consumer in the middle: commits move heads, memory drains
                    for q in (fast, ref):
                        for it in list(ready_items(q.reader("a")))[:5]:
                            q.reader("a").commit(it)
                assert _state(fast) == _state(ref)
            got = {}
            for label, q in (("fast", fast), ("ref", ref)):
                got[label] = [(it.id, it.data, it.error_count) for it in ready_items(q.reader("b"))]
            assert got["fast"] == got["ref"]
            assert [len(d) for _i, d, _e in got["fast"]] == sizes
        finally:
            fast.close()
            ref.close()


def test_the_add_time_never_goes_back(tmp_path):
    q = JournaledQueue(str(tmp_path / "q"))
    r = q.reader("r")
    state, _writer = q.journal.appending_parts()
    with q._lock, state.lock:
        state.last_add_ms = int(time.time() * 1000) + 3_600_000  # an hour ahead: a clock stepped back
        ahead = state.last_add_ms
    q.put(b"x")
    item = r.get(block=False)
    assert item.add_time == ahead / 1000.0
    q.close()


def test_the_first_put_of_a_file_and_every_64_kib_are_indexed(tmp_path):
    q = JournaledQueue(str(tmp_path / "q"))
    state, _ = q.journal.appending_parts()
    for _ in range(200):
        q.put(b"y" * 1000)
    jf = state.files[-1]
    assert jf.index_ids[0] == jf.header.first_id
    assert len(jf.index_offsets) >= 3
    gaps = [b - a for a, b in zip(jf.index_offsets, jf.index_offsets[1:])]
    assert all(64 * 1024 <= g < 64 * 1024 + 1100 for g in gaps)
    q.close()


@pytest.mark.parametrize(
    "case",
    ["max_items", "max_size", "bytearray", "too_large", "closed", "next_file", "poisoned"],
)
def test_what_the_compiled_put_declines_it_leaves_untouched(tmp_path, case):
    config = QueueConfig(journal_size=8192, max_item_size=5000)
    q = JournaledQueue(str(tmp_path / "q"), config)
    q.reader("r", ReaderConfig(max_items=1000) if case == "max_items" else None)
    if case == "max_size":
        q.reader("s", ReaderConfig(max_size=1 << 20))
    q.put(b"first")
    data: object = b"z" * 100
    if case == "bytearray":
        data = bytearray(b"z" * 100)
    elif case == "too_large":
        data = b"z" * 5001
    elif case == "closed":
        q._put.close()
    elif case == "next_file":
        data = b"z" * 7000
    elif case == "poisoned":
        q.journal.appending_parts()[0].poison(OSError(28, "No space left on device"))
    before = _state(q) if case != "closed" else None
    assert q._plain_put(data) is None
    if before is not None:
        assert _state(q) == before
    q._put.closed = False
    q.close()


def test_a_failing_write_out_is_raised_and_both_locks_are_free_after(tmp_path, monkeypatch):
    q = JournaledQueue(str(tmp_path / "q"), QueueConfig(sync="never"))  # every put is written out
    state, writer = q.journal.appending_parts()

    def refuse() -> None:
        raise state.poison(OSError(28, "No space left on device"))

    monkeypatch.setattr(writer, "write_out_locked", refuse)
    with pytest.raises(JournalIOError):
        q.put(b"x")
    assert not q._lock.locked() and not state.lock.locked()
    with pytest.raises(JournalIOError):  # poisoned: the reference path refuses, saying so
        q.put(b"x")
    q.close()


def test_a_reader_core_that_raises_in_on_put_fails_the_put_and_frees_the_lock(tmp_path):
    q = JournaledQueue(str(tmp_path / "q"))
    core = q.reader("r").core

    class Boom(Exception):
        pass

    def on_put(items, nbytes):
        raise Boom

    core.on_put = on_put  # an instance attribute: the C method is shadowed
    with pytest.raises(Boom):
        q.put(b"x")
    assert not q._lock.locked()
    del core.on_put
    assert q.put(b"y") == 2  # the id of the failed put was taken, as by the reference
    q.close()


@pytest.mark.parametrize(
    "attack", ["buf_list", "huge_next_id", "cores_tuple", "core_without_config", "index_str"]
)
def test_odd_state_is_declined_never_crashes(tmp_path, attack):
    q = JournaledQueue(str(tmp_path / "q"))
    q.reader("r")
    state, writer = q.journal.appending_parts()
    saved = {}
    if attack == "buf_list":
        saved["buf"] = writer.buf
        writer.buf = [1, 2, 3]
    elif attack == "huge_next_id":
        saved["next_id"] = state.next_id
        state.next_id = 2**70
    elif attack == "cores_tuple":
        q._put.cores = tuple(q._put.cores)
    elif attack == "core_without_config":
        q._put.cores = [*q._put.cores, object()]
    elif attack == "index_str":
        state.files[-1].index_offsets.append("x")
    assert q._plain_put(b"data") is None
    if attack == "buf_list":
        writer.buf = saved["buf"]
    elif attack == "huge_next_id":
        state.next_id = saved["next_id"]
    elif attack in ("cores_tuple", "core_without_config"):
        q._put.cores = list(q._cores)
    else:
        state.files[-1].index_offsets.pop()
    assert q.put(b"after") == 1
    q.close()


def test_sync_always_puts_are_synced_before_they_return(tmp_path):
    q = JournaledQueue(str(tmp_path / "q"), QueueConfig(sync="always"))
    for _ in range(5):  # one thread: nothing to batch with, so each put waits for its own fsync
        before = q.fsync_count
        q.put(b"durable")
        assert q.fsync_count > before
    q.close()


def test_threads_putting_at_once_get_distinct_ids_in_order_of_the_journal(tmp_path):
    q = JournaledQueue(str(tmp_path / "q"), QueueConfig(journal_size=64 * 1024))
    r = q.reader("r")
    ids: list[list[int]] = [[] for _ in range(4)]

    def work(k: int) -> None:
        for i in range(2000):
            ids[k].append(q.put(b"%d:%d" % (k, i)))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = sorted(i for part in ids for i in part)
    assert every == list(range(1, 8001))
    items = list(ready_items(r))
    assert [it.id for it in items] == every
    for k in range(4):  # each thread's items keep its order
        mine = [it.data for it in items if it.data.startswith(b"%d:" % k)]
        assert mine == [b"%d:%d" % (k, i) for i in range(2000)]
    q.close()
