"""Compressed units (docs/format.md 4.5) on the Spark source's read path, without Spark: byte-range
planning finds units wherever a range starts, and the Arrow reader decodes their inner records with
the columnar walk, row for row what the record reader reads, damage included."""

from __future__ import annotations

import os
import random

import pytest

pytest.importorskip("pyarrow", reason="the spark extra is not installed")

import journaled  # noqa: E402
from journaled.config import QueueConfig  # noqa: E402
from journaled.format.record import PutX, Unit, decode_header, decode_one  # noqa: E402
from journaled.offline.scan import JournalScanner  # noqa: E402
from journaled.offline.segments import QueueView, read_segment  # noqa: E402
from journaled.spark import arrowread  # noqa: E402
from journaled.spark.arrowread import read_segment_arrays  # noqa: E402


def line(rnd: random.Random, i: int) -> bytes:
    return b'{"i":%d,"level":"%s","host":"web-%d","msg":"%s"}' % (
        i, rnd.choice([b"info", b"warn"]), rnd.randrange(9), rnd.choice([b"ok", b"slow request", b"retry"]),
    )  # fmt: skip


def fill(path: str, n: int, rnd: random.Random, journal_size: int = 1 << 20) -> None:
    """``n`` items: compressed batches (plain, with keys, with headers), single plain puts."""
    with journaled.JournaledQueue(
        path, QueueConfig(journal_size=journal_size, sync="never", compression="zstd")
    ) as q:
        i = 1
        while i <= n:
            k = min(n - i + 1, rnd.choice([1, 5, 40, 300]))
            payloads = [line(rnd, i + j) for j in range(k)]
            kind = rnd.choice(["plain", "keys", "headers"])
            if kind == "plain":
                q.put_many(payloads)
            elif kind == "keys":
                q.put_many(payloads, keys=[b"key-%d" % (i + j) if j % 2 == 0 else None for j in range(k)])
            else:
                q.put_many(payloads, headers={"type": b"t%d" % i})
            i += k


def truth(path: str) -> dict[int, tuple[bytes, bytes | None, list[tuple[str, bytes]] | None]]:
    out = {}
    for r in JournalScanner(path).records():
        meta = r.meta if isinstance(r, PutX) else None
        out[r.id] = (
            r.payload,
            meta.key if meta else None,
            list(meta.headers.items()) if meta and meta.headers else None,
        )
    return out


def units_in(path: str) -> list[Unit]:
    out = []
    for f in QueueView(path).files:
        data = open(f.path, "rb").read()
        pos = decode_header(data).size
        while pos < len(data):
            rec = decode_one(data, pos, 0, f.header.salt)
            if isinstance(rec, Unit):
                out.append(rec)
            pos += rec.size  # type: ignore[union-attr]
    return out


@pytest.mark.parametrize("seed", range(8))
def test_arrow_reader_reads_compressed_units_row_for_row(tmp_path, seed) -> None:
    rnd = random.Random(seed)
    q = str(tmp_path / "q")
    n = rnd.randint(50, 1500)
    fill(q, n, rnd, rnd.choice([8192, 1 << 20]))
    assert units_in(q)
    want = truth(q)
    assert sorted(want) == list(range(1, n + 1))
    view = QueueView(q)
    lo = rnd.randint(1, n)
    segments = view.plan(view.locate(lo), view.tail(), rnd.choice([64, 700, 5000, 1 << 20]))
    rows, nbytes = rnd.choice([1, 3, 32768]), rnd.choice([1, 500, 1 << 26])
    got = {}
    for seg in segments:
        for cols in read_segment_arrays(seg, None, rows, nbytes):
            assert len(cols) <= rows
            keys, headers = cols.keys().to_pylist(), cols.headers().to_pylist()
            for i, (item_id, value) in enumerate(zip(cols.ids.to_pylist(), cols.values.to_pylist())):
                assert item_id not in got
                hdrs = None if headers[i] is None else [(h["key"], h["value"]) for h in headers[i]]
                got[item_id] = (value, keys[i], hdrs)
    assert got == {i: want[i] for i in range(lo, n + 1)}
    assert [r.id for seg in segments for r in read_segment(seg)] == list(range(lo, n + 1))


def test_the_columnar_walk_decodes_units_inline_not_through_the_record_walker(tmp_path, monkeypatch) -> None:
    q = str(tmp_path / "q")
    with journaled.JournaledQueue(q, QueueConfig(sync="never", compression="zstd")) as jq:
        for k in range(20):
            jq.put_many([b'{"n":%d,"msg":"hello"}' % (k * 100 + i) for i in range(100)])

    def no_handover(*a, **k):
        raise AssertionError("handed over to the record walker")

    monkeypatch.setattr(arrowread, "read_segment", no_handover)
    view = QueueView(q)
    (seg,) = view.plan(view.locate(1), view.tail(), 1 << 30)
    ids = [i for c in read_segment_arrays(seg) for i in c.ids.to_pylist()]
    assert ids == list(range(1, 2001))


def test_a_damaged_unit_is_a_gap_to_the_arrow_reader_as_to_the_record_reader(tmp_path) -> None:
    q = str(tmp_path / "q")
    with journaled.JournaledQueue(q, QueueConfig(sync="never", compression="zstd")) as jq:
        for k in range(3):
            jq.put_many([b'{"n":%d,"msg":"hello"}' % (k * 50 + i) for i in range(50)], keys=[b"k"] * 50)
    u = units_in(q)[1]
    f = QueueView(q).files[0]
    with open(f.path, "r+b") as fh:
        fh.seek(u.offset + 30)
        b = fh.read(1)
        fh.seek(u.offset + 30)
        fh.write(bytes([b[0] ^ 0x40]))
    view = QueueView(q)
    (seg,) = view.plan(view.locate(1), view.tail(), 1 << 20)
    gaps_a, gaps_b = [], []
    got = [i for c in read_segment_arrays(seg, gaps_a) for i in c.ids.to_pylist()]
    want = [r.id for r in read_segment(seg, gaps_b)]
    assert got == want == list(range(1, 51)) + list(range(101, 151))
    assert gaps_a == gaps_b and [(g.lo, g.hi) for g in gaps_a] == [(51, 101)]
    assert os.path.exists(f.path)


@pytest.mark.parametrize("rows", [3, 32768])
def test_a_unit_with_right_crcs_and_ids_out_of_order_is_a_gap_to_both_readers(tmp_path, rows) -> None:
    """Straight into the batch (rows=32768) or checked first (rows=3): the columnar walk gives
    nothing of a unit the record walker calls damage, and leaves the batch as it was."""
    import struct

    from journaled.format import compressed
    from journaled.format.record import TYPE_PUTZ, FileHeader, encode_header, encode_put, encode_record

    salt = 0x5EED
    data = bytearray(encode_header(FileHeader(salt=salt, first_id=1, created_ms=1_700_000_000_000, name="q")))
    data += encode_put(salt, len(data), 1, 5, 0, b"before")
    at = len(data)
    inner = b""
    for i in (3, 2, 4, 5):  # every CRC right, the ids out of order
        inner += encode_put(compressed.unit_salt(salt, at), len(inner), i, 5, 0, b'{"msg":"hello hello"}')
    frame = compressed.zstd.compress(inner)  # type: ignore[union-attr]
    data += encode_record(salt, at, TYPE_PUTZ, struct.pack("<QIBI", 2, 4, 1, len(inner)) + frame)
    data += encode_put(salt, len(data), 6, 5, 0, b"after")
    q = tmp_path / "q"
    q.mkdir()
    (q / "q.1700000000000").write_bytes(bytes(data))
    view = QueueView(str(q), "q")
    (seg,) = view.plan(view.locate(1), view.tail(), 1 << 20)
    gaps_a, gaps_b = [], []
    got = [
        (i, v)
        for c in read_segment_arrays(seg, gaps_a, rows)
        for i, v in zip(c.ids.to_pylist(), c.values.to_pylist())
    ]
    want = [(r.id, r.payload) for r in read_segment(seg, gaps_b)]
    assert got == want == [(1, b"before"), (6, b"after")]
    assert gaps_a == gaps_b and [(g.lo, g.hi) for g in gaps_a] == [(2, 6)]


def test_the_columnar_walk_decompresses_each_unit_once(tmp_path, monkeypatch) -> None:
    q = str(tmp_path / "q")
    with journaled.JournaledQueue(q, QueueConfig(sync="never", compression="zstd")) as jq:
        for k in range(30):
            jq.put_many([b'{"n":%d,"msg":"hello"}' % (k * 100 + i) for i in range(100)])
    inflated = []
    real = arrowread.compressed.inflate

    def counting(unit: Unit) -> bytes | str:
        inflated.append(unit.offset)
        return real(unit)

    view = QueueView(q)
    (seg,) = view.plan(view.locate(1), view.tail(), 1 << 30)
    monkeypatch.setattr(arrowread.compressed, "inflate", counting)
    # batches of 250 rows: most units are cut by a batch's end, and still inflated once
    ids = [i for c in read_segment_arrays(seg, None, 250) for i in c.ids.to_pylist()]
    assert ids == list(range(1, 3001))
    assert sorted(inflated) == sorted(set(inflated)) and len(inflated) == len(units_in(q)) == 30
