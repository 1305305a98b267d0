"""A single put with metadata (a client's tagged put, a put with headers or a key) takes the
owner's single-item path: the same records, ids, errors and de-duplication as ``put_many``'s
batch path, its metadata encoded once, and readers given a plain ``Item`` for a put that
carries only a producer's tag (the tag is the owner's business, as read back from disk)."""

from __future__ import annotations

import pytest

from journaled import JournaledQueue, QueueConfig, ReaderConfig
from journaled.errors import QueueClosed
from journaled.format import metadata
from journaled.format.metadata import Meta
from journaled.format.record import Put, PutX
from journaled.item import Item, MetaItem
from journaled.log.state import Cursor
from journaled.owner.dedup import Producers
from journaled.remote import handlers
from journaled.remote import protocol as proto

PID = 0xBEEF


def records(q: JournaledQueue) -> list[object]:
    jf = q.journal.files[0]
    recs, _ = q.journal.read(Cursor(jf.ms, jf.header.size, jf.first_id), max_items=1000)
    return list(recs)


def no_batch_path(q: JournaledQueue, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail any append of ``q`` made by put_many's batch path: it appends runs without their
    metadata encoded (four arguments), while the single-item path passes the encoding it made
    for the size check (the journal's ``append_meta`` is replaced on this queue's journal only)."""
    append_meta = q.journal.append_meta

    def single_only(*args: object) -> object:
        if len(args) < 5:
            raise AssertionError("a single put went through the batch path")
        return append_meta(*args)

    monkeypatch.setattr(q.journal, "append_meta", single_only)


def test_a_tagged_single_put_retried_returns_the_same_id_and_stores_once(tmp_path, monkeypatch) -> None:
    with JournaledQueue(tmp_path / "q") as q:
        no_batch_path(q, monkeypatch)
        r = q.reader("r")
        first = q.put_many([b"a"], producer=(PID, 7))
        assert q.put_many([b"a"], producer=(PID, 7)) == first
        assert q.put_many([b"b"], producer=(PID, 8)) == [first[0] + 1]
        assert q.put_many([b"b"], producer=(PID, 8)) == [first[0] + 1]
        assert q.stats().put == 2
        assert [it.data for it in r.get_many(10, timeout=0)] == [b"a", b"b"]
    with JournaledQueue(tmp_path / "q") as q:  # rebuilt from the journal at the first tagged put
        assert q.put_many([b"b"], producer=(PID, 8)) == [first[0] + 1]
        assert q.journal.next_id == first[0] + 2


def test_a_batch_retry_finds_the_items_of_single_tagged_puts(tmp_path) -> None:
    with JournaledQueue(tmp_path / "q") as q:
        ids = [q.put_many([b"p%d" % i], producer=(PID, i))[0] for i in range(3)]
        assert q.put_many([b"p0", b"p1", b"p2", b"p3"], producer=(PID, 0)) == [*ids, ids[-1] + 1]
        assert q.stats().put == 4


def test_readers_get_a_plain_item_for_a_put_with_only_a_producer_tag(tmp_path) -> None:
    with JournaledQueue(tmp_path / "q") as q:
        r = q.reader("r")
        q.put_many([b"tag only"], producer=(PID, 1))
        q.put_many([b"two"], producer=(PID, 2), headers={"ct": b"json"})
        q.put_many([b"x", b"y"], producer=(PID, 3))
        items = r.get_many(10, timeout=0)
    assert [type(it) for it in items] == [Item, MetaItem, Item, Item]
    assert items[0].meta is None and items[2].meta is None
    assert items[1].meta == Meta(producer=PID, sequence=2, headers={"ct": b"json"})
    assert dict(items[1].headers) == {"ct": b"json"}


def test_the_single_path_stores_the_records_the_batch_path_stores(tmp_path) -> None:
    kw = {"headers": {"ct": b"json", "é": b""}, "not_before": 4_000_000_000.0}
    with JournaledQueue(tmp_path / "one") as one, JournaledQueue(tmp_path / "two") as two:
        one.put(b"a", key=b"k1", ttl=60, **kw)
        one.put_many([b"b"], keys=[b"k2"], producer=(PID, 5), **kw)
        one.put_many([b"c"], keys=[None])
        # batches of two whose first items are the puts above
        two.put_many([b"a", b"-"], keys=[b"k1", None], ttl=60, **kw)
        two.put_many([b"b", b"-"], keys=[b"k2", None], producer=(PID, 5), **kw)
        two.put_many([b"c", b"-"], keys=[None, None])
        got, want = records(one), records(two)[::2]
    assert [type(rec) for rec in got] == [PutX, PutX, Put] == [type(rec) for rec in want]
    assert [(rec.payload, rec.size) for rec in got] == [(rec.payload, rec.size) for rec in want]
    assert [rec.meta for rec in got[:2]] == [rec.meta for rec in want[:2]]
    assert got[0].expire_ms > 0 and got[1].expire_ms == 0
    assert (got[1].meta.producer, got[1].meta.sequence) == (PID, 5)


def test_a_single_put_with_headers_measures_its_header_block_once(tmp_path, monkeypatch) -> None:
    calls = []
    measure = metadata.header_bytes

    def counted(headers: object) -> int:
        calls.append(headers)
        return measure(headers)  # type: ignore[arg-type]

    monkeypatch.setattr(metadata, "header_bytes", counted)
    with JournaledQueue(tmp_path / "q") as q:
        q.reader("r")
        q.put(b"x" * 100, headers={"ct": b"json"}, key=b"k")
        assert len(calls) <= 1  # checking the limit; the record's size comes from its encoding
        assert dict(q.reader("r").get(timeout=0).headers) == {"ct": b"json"}


def test_a_put_many_with_headers_measures_its_header_block_once(tmp_path, monkeypatch) -> None:
    calls = []
    measure = metadata.header_bytes

    def counted(headers: object) -> int:
        calls.append(headers)
        return measure(headers)  # type: ignore[arg-type]

    monkeypatch.setattr(metadata, "header_bytes", counted)
    with JournaledQueue(tmp_path / "q") as q:
        r = q.reader("r")
        q.put_many(
            [b"x%d" % i for i in range(50)], headers={"ct": b"json"}, keys=[b"k%d" % i for i in range(50)]
        )
        assert len(calls) <= 1  # once per put, not per item
        items = r.get_many(100, timeout=0)
    assert [(dict(it.headers), it.key) for it in items] == [({"ct": b"json"}, b"k%d" % i) for i in range(50)]


def test_a_single_keyed_put_in_the_window_returns_the_first_id_and_stores_nothing(
    tmp_path, monkeypatch
) -> None:
    with JournaledQueue(tmp_path / "q", QueueConfig(dedup_window=60, sync="always")) as q:
        no_batch_path(q, monkeypatch)
        first = q.put(b"a", key=b"k")
        assert q.put(b"again", key=b"k") == first
        assert q.put_many([b"again"], keys=[b"k"]) == [first]
        assert q.put(b"stored", key=b"k", dedup=False) == first + 1
        assert q.stats().put == 2


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"keys": [b""]}, ValueError),
        ({"keys": ["text"]}, TypeError),
        ({"producer": (0, 1)}, ValueError),
        ({"producer": [PID, 1]}, TypeError),
        ({"headers": {"h": "text"}}, TypeError),
        ({"delay": -1}, ValueError),
        ({"ttl": float("nan"), "producer": (PID, 1)}, ValueError),
    ],
)
def test_a_bad_single_put_raises_as_a_batch_does_and_stores_nothing(tmp_path, kwargs, error) -> None:
    with JournaledQueue(tmp_path / "q") as q:
        with pytest.raises(error):
            q.put_many([b"x"], **kwargs)
        with pytest.raises(error):
            q.put_many([b"x", b"y"], **{k: v * 2 if k == "keys" else v for k, v in kwargs.items()})
        assert q.journal.next_id == 1 and q.stats().put == 0


def test_a_tagged_single_put_on_a_closed_queue_raises_queue_closed(tmp_path) -> None:
    q = JournaledQueue(tmp_path / "q")
    q.close()
    with pytest.raises(QueueClosed):
        q.put_many([b"x"], producer=(PID, 1))


def test_single_puts_with_metadata_rotate_files_and_read_back_in_order(tmp_path) -> None:
    config = QueueConfig(journal_size=4096)
    with JournaledQueue(tmp_path / "q", config) as q:
        ids = [q.put(b"p%03d" % i * 40, headers={"n": b"%d" % i}) for i in range(100)]
        ids += [q.put_many([b"t%03d" % i * 40], producer=(PID, i))[0] for i in range(100)]
        assert len(q.journal.files) > 3
    assert ids == list(range(1, 201))
    with JournaledQueue(tmp_path / "q", config) as q:
        items = q.reader("r", ReaderConfig(start="earliest")).get_many(1000, timeout=0)
        assert [it.data for it in items] == [b"p%03d" % i * 40 for i in range(100)] + [
            b"t%03d" % i * 40 for i in range(100)
        ]
        assert [dict(it.headers) for it in items[:100]] == [{"n": b"%d" % i} for i in range(100)]
        assert q.put_many([b"t099" * 40], producer=(PID, 99)) == [200]


def test_producers_remember_pairs_added_one_by_one_as_added_together() -> None:
    pairs = {1: [(0, 10), (1, 11), (2, 12), (4, 13), (5, 20), (3, 21)], 2: [(7, 14), (8, 15), (0, 16)]}
    one, many = Producers(max_runs=3), Producers(max_runs=3)
    for pid, got in pairs.items():
        for t, (seq, item_id) in enumerate(got):
            one.add_one(pid, seq, item_id, 1000 + t)
        many.add(pid, got, 1000 + len(got) - 1)
    for pid in pairs:
        assert one.runs(pid) == many.runs(pid)
        assert one.find(pid, 0, 9) == many.find(pid, 0, 9)
    one.add_one(1, 4, 22, 1010)  # producer 1 is now the most recently used of both
    many.add(1, [(4, 22)], 1010)
    one.expire(1005 + one.window_ms)
    many.expire(1005 + many.window_ms)
    assert len(one) == len(many) == 1 and one.runs(1) == many.runs(1)


def test_a_clients_tagged_put_request_retried_is_answered_with_the_same_id(tmp_path) -> None:
    with JournaledQueue(tmp_path / "q") as q:
        request = {"op": "put", "tag": [PID, 3]}
        first = handlers.put_ids(q, "put", request, bytearray(b"payload"))
        assert handlers.put_ids(q, "put", dict(request), b"payload") == first
        assert handlers.put_ids(q, "put", {"op": "put", "tag": [PID, 4]}, b"next") == [first[0] + 1]
        for bad in ([PID, "4"], [PID, 4, 5], [True, 4], {"id": PID}):
            with pytest.raises(proto.ProtocolError):
                handlers.put_ids(q, "put", {"op": "put", "tag": bad}, b"bad")
        with pytest.raises(ValueError):
            handlers.put_ids(q, "put", {"op": "put", "tag": [0, 5]}, b"bad")
        assert q.stats().put == 2
        assert [it.data for it in q.reader("r", ReaderConfig(start="earliest")).get_many(9, timeout=0)] == [
            b"payload",
            b"next",
        ]


@pytest.mark.parametrize(
    ("name", "message"),
    [("\ud800", "not valid Unicode"), ("\ud800" * 100, "must be 1 to"), ("é" * 128, "must be 1 to")],
)
def test_a_bad_header_name_is_refused_with_the_rule_it_breaks(tmp_path, name, message) -> None:
    with JournaledQueue(tmp_path / "q") as q:
        with pytest.raises(ValueError, match=message):
            q.put(b"x", headers={name: b"v"})


def test_headers_at_the_size_limit_are_accepted_and_one_byte_more_refused(tmp_path) -> None:
    room = metadata.MAX_HEADER_BYTES - 5 - 1  # one header named "h"
    with JournaledQueue(tmp_path / "q") as q:
        q.put(b"x", headers={"h": b"v" * room})
        with pytest.raises(ValueError, match="more than the"):
            q.put(b"x", headers={"h": b"v" * (room + 1)})
        assert q.stats().put == 1
