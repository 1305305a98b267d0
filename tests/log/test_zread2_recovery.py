"""Opening a compressed queue (recovery of its newest file) inflates only the last unit it keeps
in the default ``salvage`` mode: the others are taken on their CRC ([F-16]) and checked inside
([F-45]) by the reader that gets to them; the other modes, which promise to find damage at open,
inflate every unit."""

from __future__ import annotations

import pytest
from crc32c import crc32c

from journaled import JournaledQueue, QueueConfig
from journaled.errors import Empty
from journaled.format import compressed
from journaled.format.record import Unit, decode_header
from journaled.log import recoveryplan, walker
from support.units import file_units


def line(i: int) -> bytes:
    return b'{"ts":"2026-11-28T19:%02d:%02d","level":"%s","host":"web-%d","latency_ms":%d}' % (
        i // 60 % 60, i % 60, (b"info", b"warn")[i % 2], i % 9, i * 7 % 500,
    )  # fmt: skip


def make(path: str, singles: bool = False) -> None:
    """12 units of 200 items (ids 1..2400); with ``singles``, a plain record after every unit."""
    with JournaledQueue(path, QueueConfig(compression="zstd", sync="never"), name="q") as q:
        q.reader("r")
        for k in range(12):
            q.put_many([line(k) for _ in range(200)])
            if singles:
                q.put(b"single %d" % k)


def units(path: str) -> tuple[str, int, list[Unit]]:
    return file_units(path)


def damage_content(path: str, which: int) -> Unit:
    """Flip a byte of unit ``which``'s frame and give the record its right CRC again."""
    f, salt, us = units(path)
    u = us[which]
    with open(f, "r+b") as fh:
        fh.seek(u.offset)
        rec = bytearray(fh.read(u.size))
        rec[-5] ^= 0xFF
        rec[:4] = crc32c(bytes(rec[4:]), (salt ^ u.offset) & 0xFFFFFFFF).to_bytes(4, "little")
        fh.seek(u.offset)
        fh.write(rec)
    return u


@pytest.fixture
def inflated(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The offsets of the units inflated (the cache of decoded units emptied first)."""
    monkeypatch.setattr(walker, "_UNITS", {})
    out: list[int] = []
    real = compressed.inflate

    def counting(unit: Unit) -> bytes | str:
        out.append(unit.offset)
        return real(unit)

    monkeypatch.setattr(compressed, "inflate", counting)
    return out


def test_opening_a_compressed_queue_inflates_only_its_last_unit(tmp_path, inflated) -> None:
    path = str(tmp_path / "q")
    make(path)
    last = units(path)[2][-1]
    with JournaledQueue(path, name="q") as q:
        assert inflated == [last.offset], f"{len(inflated)} units inflated at open"
        assert q.put(b"next") == 2401  # the next id follows the last unit's last id
        assert q.recovery_report == []


@pytest.mark.parametrize("mode", ["point_in_time", "tolerate_tail", "strict"])
def test_the_modes_that_find_damage_at_open_inflate_every_unit(tmp_path, inflated, mode) -> None:
    path = str(tmp_path / "q")
    make(path)
    with JournaledQueue(path, QueueConfig(recovery=mode), name="q"):
        assert sorted(inflated) == [u.offset for u in units(path)[2]]


def test_a_unit_damaged_inside_is_found_by_the_reader_and_loses_only_its_items(tmp_path) -> None:
    path = str(tmp_path / "q")
    make(path)
    u = damage_content(path, 5)  # ids 1001..1200
    with JournaledQueue(path, name="q") as q:
        assert q.recovery_report == []  # taken on its CRC at open
        r = q.reader("r")
        got = []
        while True:
            try:
                items = r.get_many(1000, timeout=0)
            except Empty:
                break
            for it in items:
                assert it.data == line((it.id - 1) // 200)
                r.commit(it)
            got += [it.id for it in items]
        assert got == [i for i in range(1, 2401) if not 1001 <= i <= 1200]
        (event,) = q.recovery_report
        assert (event.action, event.offset, event.ids_lost) == ("skipped-damage", u.offset, (1001, 1200))


def test_a_last_unit_damaged_inside_is_found_at_open_as_by_a_full_scan(tmp_path, inflated) -> None:
    path = str(tmp_path / "q")
    make(path)
    u = damage_content(path, 11)
    f = units(path)[0]
    data = open(f, "rb").read()
    header = decode_header(data)
    full = recoveryplan.scan_file(data, header, f)
    lazy = recoveryplan.scan_for_open(data, header, f, "salvage")
    assert lazy == full and [s.offset for s in full.spans] == [u.offset]
    with JournaledQueue(path, name="q") as q:
        (event,) = q.recovery_report
        assert (event.action, event.offset) == ("cut-at-damage", u.offset)


@pytest.mark.parametrize("singles", [False, True])
def test_the_lazy_scan_keeps_the_full_scans_ids_offsets_and_latest_add_time(tmp_path, singles) -> None:
    path = str(tmp_path / "q")
    make(path, singles)
    f = units(path)[0]
    data = open(f, "rb").read()
    header = decode_header(data)
    full = recoveryplan.scan_file(data, header, f)
    lazy = recoveryplan.scan_for_open(data, header, f, "salvage")
    assert lazy.max_id() == full.max_id() == 2400 + 12 * singles
    assert max(r[2] for r in lazy.records) == max(r[2] for r in full.records)
    assert {(i, o) for i, o, _ in lazy.records} <= {(i, o) for i, o, _ in full.records}
    assert [r[1] for r in lazy.records] == sorted(r[1] for r in lazy.records)
    assert [r[0] for r in lazy.records] == sorted({r[0] for r in lazy.records})
    # every record boundary (each unit's, each single's) is there, with its first id
    firsts = {o: min(i for i, oo, _ in full.records if oo == o) for _, o, _ in full.records}
    assert {o: min(i for i, oo, _ in lazy.records if oo == o) for _, o, _ in lazy.records} == firsts
