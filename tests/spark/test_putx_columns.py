"""Items with a key, headers or a not-before time (PUTX records) on the Spark source's read
path, without Spark: byte-range planning finds them (offline/segments.py), the columnar walk
hands them over instead of misreading them, and the Arrow reader gives them with their
metadata (spark/arrowread.py), row for row what the record reader reads.  A PUTX carrying only a
producer's tag (every put of a client process) is read by the columnar walk as a PUT is, with
null metadata columns."""

from __future__ import annotations

import os
import random

import pytest

pytest.importorskip("pyarrow", reason="the spark extra is not installed")

import journaled  # noqa: E402
from journaled.config import QueueConfig  # noqa: E402
from journaled.format import fallback, speedups  # noqa: E402
from journaled.format.columns import MORE, new_columns  # noqa: E402
from journaled.format.metadata import Meta  # noqa: E402
from journaled.format.record import PutX, encode_put, encode_putx  # noqa: E402
from journaled.offline.scan import JournalScanner  # noqa: E402
from journaled.offline.segments import QueueView, read_segment  # noqa: E402
from journaled.spark import arrowread  # noqa: E402
from journaled.spark.arrowread import read_segment_arrays  # noqa: E402

BIG = QueueConfig(journal_size=16 << 20, sync="never")


@pytest.mark.parametrize("decode_columns", [speedups.decode_columns, fallback.decode_columns])
def test_decode_columns_stops_at_a_putx_and_reads_nothing_of_it(decode_columns):
    salt = 0x5EED
    buf = bytearray(encode_put(salt, 0, 1, 10, 0, b"plain"))
    at_putx = len(buf)
    buf += encode_putx(salt, at_putx, 2, 11, 0, Meta(key=b"k", headers={"h": b"v"}), b"meta")
    buf += encode_put(salt, len(buf), 3, 12, 0, b"after")
    cols = new_columns()
    pos, last, status = decode_columns(bytes(buf), 0, salt, 0, 0, 1 << 62, 1 << 62, 100, 1 << 20, cols)
    assert (pos, last, status) == (at_putx, 1, MORE)
    assert bytes(cols[4]) == b"plain" and len(cols[0]) == 8
    # and from the PUTX on: nothing walked, nothing appended
    assert decode_columns(bytes(buf), 0, salt, at_putx, 0, 1 << 62, 1 << 62, 100, 1 << 20, cols)[:2] == (
        at_putx,
        None,
    )
    assert bytes(cols[4]) == b"plain"


def _queue(path: str, n: int, rnd: random.Random, config: QueueConfig = BIG) -> None:
    """``n`` items of mixed kinds: plain PUTs, PUTXs with keys, with headers, not yet due."""
    with journaled.JournaledQueue(path, config) as q:
        i = 1
        while i <= n:
            k = min(n - i + 1, rnd.randint(1, 9))
            payloads = [rnd.randbytes(rnd.choice([0, 3, 90, 700])) for _ in range(k)]
            kind = rnd.choice(["plain", "keys", "headers", "later"])
            if kind == "plain":
                q.put_many(payloads)
            elif kind == "keys":
                q.put_many(payloads, keys=[b"key-%d" % (i + j) if j % 2 == 0 else None for j in range(k)])
            elif kind == "headers":
                q.put_many(payloads, headers={"type": b"t%d" % i, "é": b"\x00"}, expire_at=4_000_000_000)
            else:
                q.put_many(payloads, not_before=4_000_000_000 + i)
            i += k


def _truth(path: str) -> dict[int, tuple[bytes, bytes | None, list[tuple[str, bytes]] | None, int | None]]:
    from journaled.offline.scan import JournalScanner

    out = {}
    for r in JournalScanner(path).records():
        meta = r.meta if isinstance(r, PutX) else None
        key = meta.key if meta else None
        headers = list(meta.headers.items()) if meta and meta.headers else None
        out[r.id] = (r.payload, key, headers, meta.not_before_ms if meta and meta.not_before_ms else None)
    return out


def test_byte_range_planning_finds_putx_records_wherever_a_range_starts(tmp_path):
    q = str(tmp_path / "q")
    with journaled.JournaledQueue(q, BIG) as jq:
        jq.put_many([b"x" * 100] * 3000, keys=[b"k%d" % i for i in range(3000)])
    view = QueueView(q)
    assert os.path.getsize(view.files[0].path) > 4 * 64 * 1024  # more than the tail's probe
    assert view.tail().id == 3001
    assert view.locate(1777).id == 1777
    segments = view.plan(view.locate(1), view.tail(), 5000)
    assert len(segments) > 50
    ids = [r.id for seg in segments for r in read_segment(seg)]
    assert ids == list(range(1, 3001))


@pytest.mark.parametrize("seed", range(12))
def test_arrow_reader_gives_putx_rows_with_their_key_and_headers(tmp_path, seed):
    rnd = random.Random(seed)
    q = str(tmp_path / "q")
    n = rnd.randint(1, 400)
    _queue(q, n, rnd, QueueConfig(journal_size=rnd.choice([8192, 1 << 20]), sync="never"))
    truth = _truth(q)
    view = QueueView(q)
    lo = rnd.randint(1, n)
    segments = view.plan(view.locate(lo), view.tail(), rnd.choice([64, 700, 5000, 1 << 20]))
    rows, nbytes = rnd.choice([1, 3, 32768]), rnd.choice([1, 500, 1 << 26])
    got = {}
    for seg in segments:
        for cols in read_segment_arrays(seg, None, rows, nbytes):
            assert len(cols) <= rows
            keys, headers = cols.keys().to_pylist(), cols.headers().to_pylist()
            due = cols.not_before_ms().to_pylist()
            for i, (item_id, value) in enumerate(zip(cols.ids.to_pylist(), cols.values.to_pylist())):
                assert item_id not in got
                hdrs = None if headers[i] is None else [(h["key"], h["value"]) for h in headers[i]]
                got[item_id] = (value, keys[i], hdrs, due[i])
    assert got == {i: truth[i] for i in range(lo, n + 1)}


def test_arrow_reader_skips_damage_after_a_putx_as_the_record_reader_does(tmp_path):
    q = str(tmp_path / "q")
    with journaled.JournaledQueue(q, BIG) as jq:
        jq.put_many([b"a" * 50] * 10, keys=[b"k%d" % i for i in range(10)])
    view = QueueView(q)
    f = view.files[0]
    with open(f.path, "r+b") as fh:  # flip a byte in the payload of the fourth record
        rec_size = (os.path.getsize(f.path) - f.header.size) // 10
        fh.seek(f.header.size + 3 * rec_size + rec_size - 5)
        b = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([b[0] ^ 0x40]))
    (seg,) = view.plan(view.locate(1), view.tail(), 1 << 20)
    gaps_a, gaps_b = [], []
    got = [
        (i, k)
        for c in read_segment_arrays(seg, gaps_a)
        for i, k in zip(c.ids.to_pylist(), c.keys().to_pylist())
    ]
    want = [(r.id, r.meta.key) for r in read_segment(seg, gaps_b)]
    assert got == want == [(i, b"k%d" % (i - 1)) for i in range(1, 11) if i != 4]
    assert gaps_a == gaps_b and len(gaps_a) == 1


def _arrow_rows(path: str, lo: int = 1) -> list[tuple[object, ...]]:
    """(id, value, add_ms, expire_ms, key, headers, not_before) of every row the Arrow reader gives."""
    view = QueueView(path)
    out: list[tuple[object, ...]] = []
    for seg in view.plan(view.locate(lo), view.tail(), 1 << 20):
        for cols in read_segment_arrays(seg, None, 1000):
            out += zip(
                cols.ids.to_pylist(),
                cols.values.to_pylist(),
                cols.add_ms.to_pylist(),
                cols.expire_ms.to_pylist(),
                cols.keys().to_pylist(),
                cols.headers().to_pylist(),
                cols.not_before_ms().to_pylist(),
            )
    return out


def test_tag_only_putx_rows_read_as_the_same_puts_in_the_columnar_walk(tmp_path, monkeypatch):
    rnd = random.Random(25)
    payloads = [rnd.randbytes(rnd.choice([0, 3, 90, 700])) for _ in range(3000)]
    tagged, plain = str(tmp_path / "tagged"), str(tmp_path / "plain")
    for path, producer in ((tagged, 77), (plain, None)):
        with journaled.JournaledQueue(path, QueueConfig(journal_size=256 << 10, sync="never")) as q:
            for i in range(0, len(payloads), 100):
                run = payloads[i : i + 100]
                expire = None if i % 200 else 4_000_000_000
                if producer is None:
                    q.put_many(run, expire_at=expire)
                else:
                    q.put_many(run, expire_at=expire, producer=(producer, 1 + i))
    records = list(JournalScanner(tagged).records())
    assert {type(r) for r in records} == {PutX}  # every item is a tag-only PUTX on disk
    decoded_in_python = []
    real_decode_one = arrowread.decode_one
    monkeypatch.setattr(
        arrowread, "decode_one", lambda *a: decoded_in_python.append(a) or real_decode_one(*a)
    )
    got = _arrow_rows(tagged)
    assert decoded_in_python == []
    assert got == [(r.id, r.payload, r.add_ms, r.expire_ms, None, None, None) for r in records]
    assert [(row[0], row[1], row[3]) for row in got] == [
        (row[0], row[1], row[3]) for row in _arrow_rows(plain)
    ]
    assert [row[0] for row in got] == list(range(1, 3001))


@pytest.mark.parametrize("decode_columns", [speedups.decode_columns, fallback.decode_columns])
def test_decode_columns_with_the_metadata_columns_takes_a_putx_as_a_row(decode_columns):
    salt = 0x5EED
    buf = bytearray(encode_put(salt, 0, 1, 10, 0, b"plain"))
    buf += encode_putx(salt, len(buf), 2, 11, 0, Meta(7, 0, 0, b"k", {"h": b"v", "é": b""}), b"meta")
    buf += encode_put(salt, len(buf), 3, 12, 0, b"after")
    cols = new_columns(meta=True)
    assert decode_columns(bytes(buf), 0, salt, 0, 0, 1 << 62, 1 << 62, 100, 1 << 20, cols) == (
        len(buf),
        3,
        MORE,
    )
    got = arrowread.to_arrow(cols)
    assert got.ids.to_pylist() == [1, 2, 3] and got.values.to_pylist() == [b"plain", b"meta", b"after"]
    assert got.keys().to_pylist() == [None, b"k", None]
    assert got.not_before_ms().to_pylist() == [None, 7, None]
    assert got.headers().to_pylist() == [
        None,
        [{"key": "h", "value": b"v"}, {"key": "é", "value": b""}],
        None,
    ]


def test_putx_rows_with_a_key_headers_or_a_not_before_are_read_in_the_columnar_walk(tmp_path, monkeypatch):
    """No row of a journal of items with metadata is decoded in Python: the columnar walk
    (compiled or its reference) takes them, keys, headers and not-befores in its buffers."""
    q = str(tmp_path / "q")
    _queue(q, 600, random.Random(7))
    truth = _truth(q)
    assert any(v[1] is not None for v in truth.values()) and any(v[2] for v in truth.values())
    decoded_in_python = []
    real_decode_one = arrowread.decode_one
    monkeypatch.setattr(
        arrowread, "decode_one", lambda *a: decoded_in_python.append(a) or real_decode_one(*a)
    )
    monkeypatch.setattr(arrowread, "read_segment", lambda *a: pytest.fail("handed over to the record reader"))
    got = {
        row[0]: (row[1], row[4], None if row[5] is None else [(h["key"], h["value"]) for h in row[5]], row[6])
        for row in _arrow_rows(q)
    }
    assert decoded_in_python == []
    assert got == truth
