"""A single put with headers remembers the last headers it checked (``PutPath.same_headers``): a put
giving the same names and values (the usual case: the same few headers on every put) reuses their
checked mapping, encoding and ``Meta`` instead of making them again, so its readers hold one
collector-tracked object per item (the ``MetaItem``), not four.  Anything else -- other values,
another order, names or values of other types, a mapping that is not a dict -- is checked afresh,
with the errors and records of any put; and a reader reads no clock for an item without a
not-before (issue 37, a put with a key or headers)."""

from __future__ import annotations

import gc
import time
from collections.abc import Mapping

import pytest

from journaled import JournaledQueue
from journaled.core import retry
from journaled.errors import Empty
from journaled.format.metadata import NO_HEADERS, Meta
from journaled.format.record import PutX
from journaled.item import MetaItem
from journaled.log.state import Cursor


def records(q: JournaledQueue) -> list[PutX]:
    jf = q.journal.files[0]
    recs, _ = q.journal.read(Cursor(jf.ms, jf.header.size, jf.first_id), max_items=1000)
    return [r for r in recs if isinstance(r, PutX)]


def tracked() -> int:
    gc.collect()
    return len(gc.get_objects())


def test_puts_with_the_same_headers_share_one_read_only_mapping_and_meta(tmp_path):
    with JournaledQueue(tmp_path / "q") as q:
        r = q.reader("r")
        for _ in range(3):
            q.put(b"x", headers={"ct": b"json", "v": b"2"})
        a, b, c = r.get_many(3, timeout=0)
    assert a.headers is b.headers is c.headers
    assert a.meta is b.meta is c.meta == Meta(headers={"ct": b"json", "v": b"2"})
    with pytest.raises(TypeError):
        a.headers["ct"] = b"changed"  # type: ignore[index]


def test_readers_hold_one_tracked_object_per_item_put_with_the_same_headers(tmp_path):
    headers = {"trace": b"0123456789abcdef"}
    with JournaledQueue(tmp_path / "q") as q:
        q.reader("r")
        q.put(b"warm", headers=headers)
        before = tracked()
        for _ in range(2000):
            q.put(b"x" * 100, headers=headers)
        per_item = (tracked() - before) / 2000
    # before: a mappingproxy, a Meta and the MetaItem each (3.0; the dict holds only str and bytes)
    assert per_item < 1.2, f"{per_item:.2f} tracked objects per item"


def test_headers_changed_in_place_after_a_put_are_stored_as_they_are_now(tmp_path):
    headers = {"ct": b"json"}
    with JournaledQueue(tmp_path / "q") as q:
        r = q.reader("r")
        q.put(b"1", headers=headers)
        headers["ct"] = b"xml"
        q.put(b"2", headers=headers)
        headers["extra"] = b""
        q.put(b"3", headers=headers)
        got = r.get_many(3, timeout=0)
        on_disk = [dict(rec.meta.headers) for rec in records(q)]
    expected = [{"ct": b"json"}, {"ct": b"xml"}, {"ct": b"xml", "extra": b""}]
    assert [dict(it.headers) for it in got] == expected
    assert on_disk == expected


def test_the_same_headers_in_another_order_are_stored_in_that_order(tmp_path):
    with JournaledQueue(tmp_path / "q") as q:
        r = q.reader("r")
        q.put(b"1", headers={"a": b"1", "b": b"2"})
        q.put(b"2", headers={"b": b"2", "a": b"1"})
        got = r.get_many(2, timeout=0)
        on_disk = [list(rec.meta.headers) for rec in records(q)]
    assert [list(it.headers) for it in got] == [["a", "b"], ["b", "a"]]
    assert on_disk == [["a", "b"], ["b", "a"]]


class Name(str):
    """A str subclass: header names must be exactly ``str``."""


def test_a_name_of_a_str_subclass_equal_to_a_remembered_one_is_still_refused(tmp_path):
    with JournaledQueue(tmp_path / "q") as q:
        q.put(b"1", headers={"ct": b"json"})
        with pytest.raises(TypeError, match="header names must be str"):
            q.put(b"2", headers={Name("ct"): b"json"})
        assert q.stats().put == 1


def test_values_equal_to_remembered_ones_but_of_other_types_are_stored_as_bytes(tmp_path):
    with JournaledQueue(tmp_path / "q") as q:
        r = q.reader("r")
        q.put(b"1", headers={"ct": b"json"})
        q.put(b"2", headers={"ct": bytearray(b"json")})
        q.put(b"3", headers={"ct": memoryview(b"json")})
        got = r.get_many(3, timeout=0)
    assert all(type(it.headers["ct"]) is bytes and it.headers["ct"] == b"json" for it in got)


class Fixed(Mapping[str, bytes]):
    """A mapping that is not a dict."""

    def __getitem__(self, name: str) -> bytes:
        return {"ct": b"json"}[name]

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(["ct"])

    def __len__(self) -> int:
        return 1


def test_remembered_headers_combine_with_a_key_a_delay_and_other_mappings(tmp_path):
    with JournaledQueue(tmp_path / "q") as q:
        r = q.reader("r")
        q.put(b"1", headers={"ct": b"json"})
        q.put(b"2", headers={"ct": b"json"}, key=b"k")
        q.put(b"3", headers=Fixed())
        q.put(b"4", headers={"ct": b"json"}, not_before=1.0)  # in the past: deliverable at once
        q.put(b"5", headers={})
        got = r.get_many(5, timeout=0)
        on_disk = [rec.meta for rec in records(q)]
    assert [type(it) for it in got[:4]] == [MetaItem] * 4 and got[4].meta is None
    assert [it.key for it in got] == [None, b"k", None, None, None]
    assert all(dict(it.headers) == {"ct": b"json"} for it in got[:4]) and got[4].headers is NO_HEADERS
    assert (
        on_disk
        == [Meta(headers={"ct": b"json"}), Meta(key=b"k", headers={"ct": b"json"})]
        + [Meta(headers={"ct": b"json"})] * 2
    )


class CountingClock:
    """The real clocks, counting the reads (retry.CLOCK when a reader's core is made)."""

    def __init__(self) -> None:
        self.reads = 0

    def time(self) -> float:
        self.reads += 1
        return time.time()

    def monotonic(self) -> float:
        self.reads += 1
        return time.monotonic()


def test_a_reader_reads_no_clock_for_items_put_with_a_key_or_headers_only(tmp_path, monkeypatch):
    clock = CountingClock()
    monkeypatch.setattr(retry, "CLOCK", clock)
    with JournaledQueue(tmp_path / "q") as q:
        r = q.reader("r")
        before = clock.reads
        for i in range(50):
            q.put(b"x", key=b"k%d" % i, headers={"ct": b"json"})
        reads = clock.reads - before
        delayed = q.put(b"later", delay=3600)
        assert reads == 0, f"{reads} clock reads for 50 puts"
        assert [it.key for it in r.get_many(100, timeout=0)] == [b"k%d" % i for i in range(50)]
        assert delayed > 0
        with pytest.raises(Empty):  # the delayed item is parked: the clock is read for it
            r.get(timeout=0)
