"""Compressed units (docs/format.md 4.5) offline: ``check`` counts their items and reports a damaged
unit with exactly its ids, ``repair`` keeps the good units as units, and the scanner (``dump``) and
the owner read the result."""

from __future__ import annotations

import glob
import os

from journaled import JournaledQueue, QueueConfig
from journaled.errors import Empty
from journaled.format.record import Unit
from journaled.offline.repair import check_dir, repair_dir
from journaled.offline.scan import JournalScanner
from support.units import file_units


def item(i: int) -> bytes:
    return b'{"n":%d,"level":"info","msg":"hello"}' % i


def make(path: str) -> None:
    with JournaledQueue(path, QueueConfig(compression="zstd"), name="q") as q:
        q.reader("r")
        for k in range(3):
            q.put_many(
                [item(k * 20 + i + 1) for i in range(20)], keys=[b"k%d" % i for i in range(20)] if k else None
            )
        q.put(item(61))


def units(path: str) -> list[Unit]:
    return file_units(path)[2]


def damage_unit(path: str, k: int) -> None:
    (f,) = glob.glob(os.path.join(path, "q.[0-9]*"))
    u = units(path)[k]
    with open(f, "r+b") as fh:
        fh.seek(u.offset + 30)
        b = fh.read(1)
        fh.seek(u.offset + 30)
        fh.write(bytes([b[0] ^ 0x40]))


def owner_ids(path: str) -> list[int]:
    with JournaledQueue(path, name="q") as q:
        r = q.reader("r")
        got = []
        while True:
            try:
                batch = r.get_many(100, timeout=0)
            except Empty:
                return got
            got += [i.id for i in batch]
            for it in batch:
                r.commit(it)


def test_check_counts_the_items_of_units_and_finds_none_damaged(tmp_path) -> None:
    path = str(tmp_path / "q")
    make(path)
    report = check_dir(path, "q")
    assert report.clean and report.records == 61


def test_check_reports_a_damaged_unit_with_exactly_its_ids(tmp_path) -> None:
    path = str(tmp_path / "q")
    make(path)
    at = units(path)[1].offset
    damage_unit(path, 1)
    report = check_dir(path, "q")
    (finding,) = report.findings
    assert finding.kind == "damage" and finding.ids_lost == (21, 40) and finding.offset == at
    assert report.records == 41


def test_repair_keeps_the_good_units_as_units_and_drops_only_the_damaged_one(tmp_path) -> None:
    path = str(tmp_path / "q")
    make(path)
    damage_unit(path, 1)
    repair_dir(path, "salvage", "q")
    assert check_dir(path, "q").clean
    assert [(u.first_id, u.count) for u in units(path)] == [(1, 20), (41, 20)]
    recs = list(JournalScanner(path, "q").records())
    assert [r.id for r in recs] == list(range(1, 21)) + list(range(41, 62))
    assert [r.payload for r in recs] == [item(i) for i in [*range(1, 21), *range(41, 62)]]
    assert recs[20].meta.key == b"k0"  # type: ignore[attr-defined]
    assert owner_ids(path) == list(range(1, 21)) + list(range(41, 62))
