"""A queue with ``QueueConfig(compression="zstd")``: put_many batches become compressed units that
the owner, the scanner and a reopen after a kill all read back, the setting is stored with the
queue, and a missing binding or a damaged unit is said by name."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

from journaled import JournaledQueue, QueueConfig
from journaled.errors import CompressionUnavailable, Empty
from journaled.format import compressed
from journaled.format.record import TYPE_PUTZ, FileHeader, Unit, decode_header, decode_one
from journaled.offline.scan import JournalScanner


def line(i: int) -> bytes:
    return b'{"ts":"2026-11-28T14:%02d:%02d","level":"%s","host":"web-%d","latency_ms":%d}' % (
        i // 60 % 60, i % 60, (b"info", b"warn")[i % 2], i % 9, i * 7 % 500,
    )  # fmt: skip


def drain(path: str) -> tuple[list[tuple[int, bytes, bytes | None]], list]:
    with JournaledQueue(path, name="q") as q:
        r = q.reader("r")
        got = []
        while True:
            try:
                batch = r.get_many(1000, timeout=0)
            except Empty:
                break
            for item in batch:
                got.append((item.id, item.data, item.key))
                r.commit(item)
        return got, [e.ids_lost for e in q.recovery_report if e.ids_lost]


def units(path: str) -> list[Unit]:
    out = []
    for f in sorted(glob.glob(os.path.join(path, "q.[0-9]*"))):
        data = open(f, "rb").read()
        header = decode_header(data)
        pos = header.size
        while pos < len(data):
            rec = decode_one(data, pos, 0, header.salt)
            if isinstance(rec, Unit):
                out.append(rec)
            pos += rec.size  # type: ignore[union-attr]
    return out


def test_a_put_many_batch_is_one_unit_and_reads_back_whole(tmp_path) -> None:
    path = str(tmp_path / "q")
    with JournaledQueue(path, QueueConfig(compression="zstd"), name="q") as q:
        q.reader("r")
        assert q.put_many([line(i) for i in range(1, 2001)]) == list(range(1, 2001))
        q.put(line(2001))  # a single put stays plain
        q.put_many([line(i) for i in range(2002, 2006)], keys=[b"k%d" % i for i in range(4)])
    assert [(u.first_id, u.count) for u in units(path)] == [(1, 2000), (2002, 4)]
    got, lost = drain(path)
    assert [g[:2] for g in got] == [(i, line(i)) for i in range(1, 2006)] and lost == []
    assert [g[2] for g in got[-4:]] == [b"k0", b"k1", b"k2", b"k3"]
    assert [r.id for r in JournalScanner(path, "q").records()] == list(range(1, 2006))
    plain = sum(33 + len(line(i)) for i in range(1, 2001))
    assert units(path)[0].size * 4 < plain


def test_a_unit_never_holds_more_than_the_cap_and_a_big_item_is_plain(tmp_path) -> None:
    path = str(tmp_path / "q")
    big = b"x" * ((1 << 20) + 10)
    with JournaledQueue(path, QueueConfig(compression="zstd"), name="q") as q:
        q.reader("r")
        q.put_many([line(1), big, line(3)] + [b"y" * 5000] * 400)
    assert all(u.raw_len <= 1 << 20 for u in units(path)) and len(units(path)) >= 2
    got, _ = drain(path)
    assert [g[1] for g in got] == [line(1), big, line(3)] + [b"y" * 5000] * 400


def test_the_setting_is_stored_and_changed_for_new_writes_only(tmp_path) -> None:
    path = str(tmp_path / "q")
    with JournaledQueue(path, QueueConfig(compression="zstd"), name="q") as q:
        q.reader("r")
        q.put_many([line(i) for i in range(1, 11)])
    with JournaledQueue(path, name="q") as q:  # None keeps what is stored
        q.put_many([line(i) for i in range(11, 21)])
    with JournaledQueue(path, QueueConfig(compression="none"), name="q") as q:
        q.put_many([line(i) for i in range(21, 31)])
    with JournaledQueue(path, name="q") as q:
        q.put_many([line(i) for i in range(31, 41)])
    assert [(u.first_id, u.count) for u in units(path)] == [(1, 10), (11, 10)]
    assert "compression" not in open(os.path.join(path, "q.settings")).read()
    got, _ = drain(path)
    assert [g[:2] for g in got] == [(i, line(i)) for i in range(1, 41)]


def test_opening_a_zstd_queue_without_the_binding_names_the_extra(tmp_path, monkeypatch) -> None:
    path = str(tmp_path / "q")
    with JournaledQueue(path, QueueConfig(compression="zstd"), name="q") as q:
        q.put_many([line(i) for i in range(1, 11)])
    monkeypatch.setattr(compressed, "zstd", None)
    with pytest.raises(CompressionUnavailable, match=r"journaled\[zstd\]"):
        JournaledQueue(path, name="q")
    with pytest.raises(CompressionUnavailable, match=r"journaled\[zstd\]"):
        JournaledQueue(str(tmp_path / "other"), QueueConfig(compression="zstd"), name="q")


def test_a_damaged_unit_loses_exactly_its_items(tmp_path) -> None:
    path = str(tmp_path / "q")
    with JournaledQueue(path, QueueConfig(compression="zstd"), name="q") as q:
        q.reader("r")
        q.put_many([line(i) for i in range(1, 101)])
        q.put_many([line(i) for i in range(101, 201)])
        q.put_many([line(i) for i in range(201, 301)])
    u = units(path)[1]
    (f,) = glob.glob(os.path.join(path, "q.[0-9]*"))
    with open(f, "r+b") as fh:
        fh.seek(u.offset + 40)
        b = fh.read(1)
        fh.seek(u.offset + 40)
        fh.write(bytes([b[0] ^ 0xFF]))
    got, lost = drain(path)
    assert [g[0] for g in got] == list(range(1, 101)) + list(range(201, 301))
    assert lost == [(101, 200)]


KILLED = """
import os, sys
from journaled import JournaledQueue, QueueConfig
q = JournaledQueue(sys.argv[1], QueueConfig(compression="zstd", sync="always"), name="q")
q.reader("r")
for k in range(5):
    q.put_many([b'{"n":%d,"level":"info","msg":"hello world"}' % (k * 100 + i) for i in range(100)])
os._exit(9)
"""


def test_a_queue_killed_after_compressed_puts_reopens_with_every_item(tmp_path) -> None:
    path = str(tmp_path / "q")
    subprocess.run([sys.executable, "-c", KILLED, path], check=False, timeout=120)
    got, lost = drain(path)
    assert [g[0] for g in got] == list(range(1, 501)) and lost == []
    assert got[-1][1] == b'{"n":499,"level":"info","msg":"hello world"}'
    with JournaledQueue(path, name="q") as q:  # the next id follows the last unit's last id
        assert q.put_many([b"a", b"b"]) == [501, 502]


def test_a_torn_unit_at_the_tail_is_cut_and_its_ids_reused_never(tmp_path) -> None:
    path = str(tmp_path / "q")
    with JournaledQueue(path, QueueConfig(compression="zstd"), name="q") as q:
        q.reader("r")
        q.put_many([line(i) for i in range(1, 51)])
        q.put_many([line(i) for i in range(51, 101)])
    (f,) = glob.glob(os.path.join(path, "q.[0-9]*"))
    os.truncate(f, os.path.getsize(f) - 7)
    got, _ = drain(path)
    assert [g[0] for g in got] == list(range(1, 51))
    assert FileHeader and TYPE_PUTZ == 3


def test_a_reader_with_little_memory_reads_through_units_item_by_item(tmp_path) -> None:
    """Read-behind refills stop inside units (max_memory of a few items): every item once, in order,
    whether the queue was reopened in between or not."""
    from journaled import ReaderConfig

    path = str(tmp_path / "q")
    with JournaledQueue(path, QueueConfig(compression="zstd"), name="q") as q:
        r = q.reader("r", ReaderConfig(max_memory=1000))
        for k in range(5):
            q.put_many([line(k * 300 + i) for i in range(1, 301)])
        got = []
        for _ in range(700):
            item = r.get(timeout=1)
            got.append((item.id, item.data))
            r.commit(item)
    with JournaledQueue(path, name="q") as q:
        r = q.reader("r", ReaderConfig(max_memory=1000))
        while len(got) < 1500:
            item = r.get(timeout=1)
            got.append((item.id, item.data))
            r.commit(item)
        with pytest.raises(Empty):
            r.get(timeout=0)
    assert got == [(k * 300 + i, line(k * 300 + i)) for k in range(5) for i in range(1, 301)]


def test_a_journal_holding_units_read_without_the_binding_stops_at_the_unit_by_name(
    tmp_path, monkeypatch
) -> None:
    """Never a silent skip, never damage: the open, the scanner and check name the file, the
    unit's offset and the extra; the scanner yields every item before the unit first."""
    from journaled.log import walker
    from journaled.offline.repair import check_dir

    path = str(tmp_path / "q")
    with JournaledQueue(path, QueueConfig(compression="zstd"), name="q") as q:
        q.reader("r")
        q.put(b"first")
        q.put_many([line(i) for i in range(2, 40)])
    with JournaledQueue(path, QueueConfig(compression="none"), name="q"):
        pass  # the queue no longer asks for compression: only its journal holds a unit
    (unit,) = units(path)
    (f,) = glob.glob(os.path.join(path, "q.[0-9]*"))
    monkeypatch.setattr(compressed, "zstd", None)
    monkeypatch.setattr(walker, "_UNITS", {})
    with pytest.raises(CompressionUnavailable, match=r"journaled\[zstd\]") as exc:
        JournaledQueue(path, name="q")
    assert (exc.value.path, exc.value.offset) == (f, unit.offset)
    scanned = JournalScanner(path, "q").records()
    assert next(scanned).payload == b"first"
    with pytest.raises(CompressionUnavailable) as exc:
        next(scanned)
    assert (exc.value.path, exc.value.offset) == (f, unit.offset)
    with pytest.raises(CompressionUnavailable):
        check_dir(path, "q")


@pytest.mark.parametrize("take", [1, 7, 1000])
def test_a_reader_draining_a_compressed_queue_decompresses_each_unit_once(
    tmp_path, monkeypatch, take
) -> None:
    path = str(tmp_path / "q")
    with JournaledQueue(path, QueueConfig(compression="zstd", sync="never"), name="q") as q:
        q.reader("r")
        for k in range(40):
            q.put_many([line(k * 50 + i) for i in range(50)])
    inflated: list[int] = []
    real = compressed.inflate

    def counting(unit: Unit) -> bytes | str:
        inflated.append(unit.offset)
        return real(unit)

    with JournaledQueue(path, name="q") as q:
        monkeypatch.setattr(compressed, "inflate", counting)  # after recovery, which reads the file
        r = q.reader("r")
        got = []
        while True:
            try:
                items = r.get_many(take, timeout=0)
            except Empty:
                break
            for it in items:
                r.commit(it)
            got += [it.id for it in items]
    assert got == list(range(1, 2001))
    assert len(inflated) == len(set(inflated)) == 40, (
        f"{len(inflated)} decompressions of {len(set(inflated))} units"
    )
