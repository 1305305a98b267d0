"""A put with only a key or headers (no time, no producer's tag: the usual put with metadata) takes
``PutPath.put_marked``, four arguments where ``put_one`` takes nine, and every single put with
metadata appends through ``Writer.append_putx_one``, without ``append_meta``'s one-element tuples
(issue 37, keyput3).  The records, ids, errors and de-duplication are those of ``put_many`` of one
item, whatever the payload, key and headers are given as."""

from __future__ import annotations

import os
from types import MappingProxyType
from typing import Any

import pytest

from journaled import JournaledQueue, QueueConfig
from journaled.format.metadata import MAX_KEY, Meta
from journaled.format.record import Put, PutX
from journaled.log.state import Cursor
from journaled.owner import putpath

PURE = bool(os.environ.get("JOURNALED_PURE_PYTHON"))
pure_only = pytest.mark.skipif(not PURE, reason="replaces a method of a class mypyc compiles")


def records(q: JournaledQueue) -> list[Put]:
    jf = q.journal.files[0]  # the read goes on through the later files
    recs, _ = q.journal.read(Cursor(jf.ms, jf.header.size, jf.first_id), max_items=10_000)
    return [r for r in recs if isinstance(r, Put)]


def stored(rec: Put) -> tuple[object, ...]:
    """What a record stores, but its add time and place."""
    return (type(rec), rec.id, rec.payload, rec.expire_ms, rec.meta if isinstance(rec, PutX) else None)


class Recording:
    """Stands for a queue's ``PutPath`` (queue.py calls it through ``self._put``), noting which of
    its put methods a put calls."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not name.startswith("put"):
            return attr

        def noted(*args: Any) -> Any:
            self.calls.append(name)
            return attr(*args)

        return noted


def test_a_put_with_only_a_key_or_headers_takes_the_four_argument_route(tmp_path):
    with JournaledQueue(tmp_path / "q") as q:
        rec = Recording(q._put)
        q._put = rec  # type: ignore[assignment]
        try:
            q.put(b"a", key=b"k1")
            q.put(b"b", headers={"ct": b"json"})
            q.put(b"c", key=b"k2", headers={"ct": b"json"}, dedup=False)
            q.put(b"d")
            q.put(b"e", key=b"k3", ttl=60)
            q.put(b"f", headers={"ct": b"json"}, delay=0)
        finally:
            q._put = rec.inner
    assert rec.calls == ["put_marked", "put_marked", "put_marked", "put_plain", "put_one", "put_one"]


CASES: list[dict[str, Any]] = [
    {"key": b"k"},
    {"key": b"k" * MAX_KEY},
    {"key": bytearray(b"from a bytearray")},
    {"headers": {"ct": b"json"}},
    {"headers": {"ct": b"json", "\u00e9": b""}},
    {"headers": MappingProxyType({"a": b"1"})},
    {"headers": {"ct": bytearray(b"json")}},
    {"headers": {}},
    {"key": b"k", "headers": {}},
    {"key": b"k", "headers": {"ct": b"json"}},
]


@pytest.mark.parametrize("data", [b"payload", bytearray(b"payload"), memoryview(b"payload"), b""])
def test_a_marked_put_stores_what_put_many_of_one_item_stores(tmp_path, data):
    with JournaledQueue(tmp_path / "one") as one, JournaledQueue(tmp_path / "two") as two:
        r1, r2 = one.reader("r"), two.reader("r")
        for kw in CASES * 2:  # twice: the second time the headers are remembered ones
            key = kw.get("key")
            got = one.put(data, **kw)
            want = two.put_many([data], keys=[key], headers=kw.get("headers"))
            assert [got] == want, kw
        assert [stored(rec) for rec in records(one)] == [stored(rec) for rec in records(two)]
        items1, items2 = r1.get_many(100, timeout=0), r2.get_many(100, timeout=0)
    assert len(items1) == 2 * len(CASES)
    for a, b in zip(items1, items2, strict=True):
        assert (type(a), a.id, a.data, a.key, dict(a.headers)) == (
            type(b),
            b.id,
            b.data,
            b.key,
            dict(b.headers),
        )


BAD: list[tuple[object, dict[str, Any]]] = [
    ("text", {"key": b"k"}),
    (b"x" * 2000, {"key": b"k"}),
    (b"x", {"key": "text"}),
    (b"x", {"key": b""}),
    (b"x", {"key": b"k" * (MAX_KEY + 1)}),
    (b"x", {"key": 7}),
    (b"x", {"headers": ["not", "a", "mapping"]}),
    (b"x", {"headers": {1: b"v"}}),
    (b"x", {"headers": {"n": "text"}}),
    (b"x", {"headers": {"n": "text"}, "key": 7}),  # both bad: the headers' error first
    ("text", {"headers": {"n": "text"}, "key": 7}),  # all bad: the payload's error first
]


@pytest.mark.parametrize(("data", "kw"), BAD)
def test_a_marked_put_refuses_what_put_many_refuses_with_its_error_and_stores_nothing(tmp_path, data, kw):
    config = QueueConfig(max_item_size=1000)
    with JournaledQueue(tmp_path / "one", config) as one, JournaledQueue(tmp_path / "two", config) as two:
        with pytest.raises((TypeError, ValueError)) as got:
            one.put(data, **kw)
        with pytest.raises((TypeError, ValueError)) as want:
            two.put_many([data], keys=[kw.get("key")], headers=kw.get("headers"))
        assert (type(got.value), str(got.value)) == (type(want.value), str(want.value))
        assert records(one) == []
        assert one.put(b"after", key=b"k") == two.put_many([b"after"], keys=[b"k"])[0]


def test_a_keyed_put_within_the_dedup_window_returns_the_first_id_unless_told_not_to(tmp_path):
    with JournaledQueue(tmp_path / "q", QueueConfig(dedup_window=3600)) as q:
        r = q.reader("r")
        first = q.put(b"a", key=b"k")
        assert q.put(b"again", key=b"k") == first
        assert q.put(b"again", key=b"k", headers={"ct": b"json"}) == first
        other = q.put(b"b", key=b"k", dedup=False)
        assert other == first + 1
        assert [(it.data, it.key) for it in r.get_many(10, timeout=0)] == [(b"a", b"k"), (b"b", b"k")]


def test_a_marked_put_that_does_not_fit_the_current_file_starts_the_next(tmp_path):
    with JournaledQueue(tmp_path / "q", QueueConfig(journal_size=4096)) as q:
        r = q.reader("r")
        ids = [q.put(b"x" * 300, key=b"k%d" % i, headers={"ct": b"json"}) for i in range(40)]
        assert len(q.journal.files) > 2
        assert [rec.id for rec in records(q)] == ids == list(range(ids[0], ids[0] + 40))
        items = r.get_many(100, timeout=0)
    assert [(it.key, dict(it.headers)) for it in items] == [(b"k%d" % i, {"ct": b"json"}) for i in range(40)]


@pure_only
def test_a_single_put_with_metadata_appends_without_append_meta(tmp_path, monkeypatch):
    with JournaledQueue(tmp_path / "q") as q:

        def refused(*args: object) -> object:
            raise AssertionError("a single put with metadata went through append_meta's tuples")

        monkeypatch.setattr(q._put.writer, "append_meta", refused)
        q.put(b"a", key=b"k")
        q.put(b"b", headers={"ct": b"json"})
        q.put(b"c", key=b"k", ttl=60, not_before=1.0)
        q.put_many([b"d"], producer=(7, 1))
        monkeypatch.undo()
        assert [type(rec) for rec in records(q)] == [PutX] * 4


@pure_only
def test_a_put_amid_the_first_use_of_remembered_headers_stores_them(tmp_path, monkeypatch):
    """The remembered headers' ``Meta`` and encoding are made by the first put that reuses them,
    without the queue lock: another put reusing them meanwhile (here: made inside the encoding
    call) must find both or neither, never the ``Meta`` without its encoding."""
    headers = {"ct": b"json"}
    encode = putpath._encode_meta
    with JournaledQueue(tmp_path / "q") as q:
        r = q.reader("r")
        amid: list[int] = []

        def encode_then_put(*args: Any) -> bytes:
            if not amid and args[3] is None and args[4]:  # the remembered headers, no key
                amid.append(-1)
                amid.append(q.put(b"amid", headers=headers))
            return encode(*args)

        monkeypatch.setattr(putpath, "_encode_meta", encode_then_put)
        q.put(b"first", headers=headers)  # checks and remembers them, then makes their Meta
        q.put(b"second", headers=headers)
        assert len(amid) == 2
        recs = records(q)
        items = r.get_many(10, timeout=0)
    assert [(rec.payload, rec.meta) for rec in recs] == [
        (b"amid", Meta(headers=headers)),
        (b"first", Meta(headers=headers)),
        (b"second", Meta(headers=headers)),
    ]
    assert [(it.data, dict(it.headers)) for it in items] == [
        (p, headers) for p in (b"amid", b"first", b"second")
    ]
