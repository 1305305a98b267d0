"""docs/format.md, executable: every MUST of the spec (tagged ``[F-n]`` there) has a test here.

Files are generated with the library, damaged by hand, then read by the library and by
tests/format/spec_reader.py, a minimal reader written from the spec alone (it imports nothing from
``journaled``); both must agree byte for byte and item for item.
"""

from __future__ import annotations

import glob
import json
import os
import random
import re
import struct
import subprocess
import sys
import time

import pytest
from crc32c import crc32c

import spec_reader as spec
from conftest import ready_items
from journaled import JournaledQueue, QueueConfig
from journaled.disk.bookmarks import read_bookmark, write_bookmark
from journaled.disk.layout import detect_queue_name
from journaled.disk.spoolfiles import pending_batches, spool_put
from journaled.errors import CorruptJournal, ForeignFile, UnsupportedVersion
from journaled.format.metadata import Meta
from journaled.format.record import (
    FileHeader,
    PutX,
    decode_one,
    encode_header,
    encode_put,
    encode_putx,
    header_size,
)
from journaled.format.smallfiles import decode_crc_text, encode_crc_text
from journaled.offline.repair import check_dir, repair_dir
from journaled.offline.scan import JournalScanner
from journaled.offline.segments import QueueView, read_segment

pytestmark = pytest.mark.usefixtures("quiet")

from support.paths import ROOT  # noqa: E402


def started(jf) -> int:
    """When appending to journal file ``jf`` began, as retention counts it (docs/format.md,
    "retention_age"): the later of its name and its header's creation time."""
    return max(jf.ms, jf.header.created_ms)


SPEC = os.path.join(ROOT, "docs", "format.md")

PAYLOAD = 40
REC = 33 + PAYLOAD
HL = header_size("q")  # 39


def payload(i: int) -> bytes:
    return (b"item-%06d-" % i).ljust(PAYLOAD, b"x")


def fill(path: str, n: int, per_file: int | None = None) -> list[str]:
    size = HL + per_file * REC if per_file else 64 * 1024 * 1024
    with JournaledQueue(path, QueueConfig(sync="never", journal_size=size), name="q") as q:
        q.reader("r")
        for i in range(1, n + 1):
            assert q.put(payload(i)) == i
    return journal_files(path)


def journal_files(path: str) -> list[str]:
    return sorted(glob.glob(os.path.join(path, "q.[0-9]*")), key=lambda p: int(p.rsplit(".", 1)[1]))


def at(files: list[str], item_id: int, per_file: int) -> tuple[str, int]:
    k, j = divmod(item_id - 1, per_file)
    return files[k], HL + j * REC


def patch(path: str, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def flip(path: str, offset: int, n: int = 4) -> None:
    with open(path, "rb") as f:
        f.seek(offset)
        old = f.read(n)
    patch(path, offset, bytes(b ^ 0xFF for b in old))


def drain(path: str, reader: str = "r", **config: object) -> tuple[list[int], list]:
    with JournaledQueue(path, QueueConfig(**config), name="q") as q:  # type: ignore[arg-type]
        r = q.reader(reader)
        got = []
        for item in ready_items(r):
            got.append(item.id)
            r.commit(item)
        return got, list(q.recovery_report)


def lost(events: list) -> list[tuple[int, int]]:
    return sorted(e.ids_lost for e in events if e.ids_lost)


def spark_ids(path: str) -> list[int]:
    view = QueueView(path, "q")
    lo, hi = view.locate(view.first_id()), view.tail()
    return [r.id for seg in view.plan(lo, hi, 500) for r in read_segment(seg)]


# ------------------------------------------------------------------------------ the mapping
def test_every_must_of_the_spec_has_a_test_here() -> None:
    """Each ``[F-n]`` of docs/format.md is named by a test of this file, and the spec's MUSTs
    all carry an id."""
    with open(SPEC, encoding="utf-8") as f:
        text = f.read()
    ids = set(re.findall(r"\[F-\d+\]", text))
    assert len(ids) >= 30
    with open(__file__, encoding="utf-8") as f:
        here = f.read()
    missing = sorted((i for i in ids if i not in here), key=lambda i: int(i[3:-1]))
    assert not missing, missing
    for para in re.split(r"\n\s*\n", text):
        if "MUST" in para and "RFC 2119" not in para:
            assert re.search(r"\[F-\d+\]", para), para[:200]


# ------------------------------------------------------------------------------ 1. directory
def test_queue_name_comes_from_journal_files_else_the_directory(tmp_path) -> None:
    """[F-1] [F-2]: a checkpoint ``Q.read.7`` matches the journal pattern of a queue ``Q.read``
    but its bytes are a checkpoint's, so it names no queue."""
    path = str(tmp_path / "dir")
    with JournaledQueue(path, name="Q") as q:
        q.reader("7")
        q.put(b"x")
    assert os.path.exists(os.path.join(path, "Q.read.7"))
    assert detect_queue_name(path) == spec.queue_name(path) == "Q"
    empty = tmp_path / "plain"
    empty.mkdir()
    (empty / "app.1").write_bytes(b"a rotated log\n")  # named like a journal, bytes say no
    assert detect_queue_name(str(empty)) == spec.queue_name(str(empty)) == "plain"
    odd = tmp_path / "not valid"
    odd.mkdir()
    assert detect_queue_name(str(odd)) == spec.queue_name(str(odd)) == "queue"


def test_files_are_ordered_by_the_number_in_their_name_not_created_ms(tmp_path) -> None:
    """[F-3]: ``created_ms`` is independent of the file name; only the name orders files."""
    path = str(tmp_path / "q")
    files = fill(path, 30, per_file=10)
    with open(files[0], "rb") as f:
        head = bytearray(f.read(HL))
    head[24:32] = struct.pack("<Q", 9_999_999_999_999)  # far later than every other file
    head[HL - 4 :] = struct.pack("<I", crc32c(bytes(head[: HL - 4])))
    patch(files[0], 0, bytes(head))
    assert [p[0] for p in spec.read_queue(path).puts] == list(range(1, 31))
    assert [r.id for r in JournalScanner(path, "q").records()] == list(range(1, 31))
    got, events = drain(path)
    assert got == list(range(1, 31)) and events == []


def test_every_entry_journaled_creates_is_in_the_directory_inventory(tmp_path) -> None:
    """[F-4]: journal files, checkpoints, registry, lock, spool/, external/, archive and
    repair backups are all listed in section 1."""
    path = str(tmp_path / "q")
    cfg = QueueConfig(journal_size=HL + 3 * REC, archive_dir="archive", sync="never")
    with JournaledQueue(path, cfg, name="q") as q:
        r = q.reader("r")
        for i in range(12):
            q.put(payload(i))
        spool_put(path, [b"s1", b"s2"], key="k1")
        q.adopt_spool()
        for item in ready_items(r):
            r.commit(item)
        q.checkpoint()
        q.archive()
    write_bookmark(path, "spark", 3)
    flip(journal_files(path)[-1], HL + 10)
    repair_dir(path)
    patterns = [
        r"q\.\d{1,20}",
        r"q\.read\.[A-Za-z0-9_.:-]+",
        r"q\.readers",
        r"\.journaled\.lock",
        r"\.journaled\.lease",
        r"q\.\d{1,20}(\.at\d+)?\.damaged",
        r"spool",
        r"external",
        r"archive",
        r"repair-\d{8}T\d{6}Z",
    ]
    entries = os.listdir(path)
    assert {"spool", "external", "archive"} <= set(entries)
    assert any(e.startswith("repair-") for e in entries)
    for e in entries:
        assert any(re.fullmatch(p, e) for p in patterns), e
    for e in os.listdir(os.path.join(path, "spool")):
        assert re.fullmatch(r"ledger|rejected|\d{20}-\d+-[0-9a-f]{8}\.batch", e), e
    assert os.listdir(os.path.join(path, "archive")) and all(
        re.fullmatch(r"q\.\d{1,20}", e) for e in os.listdir(os.path.join(path, "archive"))
    )


# ------------------------------------------------------------------------------ 3. header, 11. vector
def test_the_test_vector_is_what_both_readers_write(tmp_path) -> None:
    """[F-5] [F-10]: header and record bytes of section 11, from the library, from the spec
    reader, and as printed in the spec."""
    with open(SPEC, encoding="utf-8") as f:
        text = f.read()
    block = text.split("The complete 82-byte file:", 1)[1].split("```")[1]
    printed = bytes.fromhex("".join(block.split()))
    lib = encode_header(FileHeader(salt=0x01020304, first_id=1, created_ms=1700000000000, name="events"))
    lib += encode_put(0x01020304, len(lib), 1, 1700000000000, 0, b"hello")
    mine = spec.encode_header(0x01020304, 1, 1700000000000, "events")
    mine += spec.encode_put(0x01020304, len(mine), 1, 1700000000000, 0, b"hello")
    assert lib == mine == printed and len(printed) == 82
    header, verdict = spec.parse_header(printed, "events", 1700000000000)
    assert verdict == "ok" and header is not None and header.size == 44
    assert spec.walk(printed, header.salt, 44, 82, 1)[0] == [(1, 44, 1700000000000, 0, b"hello", None)]


def test_another_version_under_a_valid_crc_is_refused_not_guessed(tmp_path) -> None:
    """[F-6]"""
    path = str(tmp_path / "q")
    files = fill(path, 5)
    with open(files[0], "rb") as f:
        head = bytearray(f.read(HL))
    head[8:10] = struct.pack("<H", 2)
    head[HL - 4 :] = struct.pack("<I", crc32c(bytes(head[: HL - 4])))
    patch(files[0], 0, bytes(head))
    before = open(files[0], "rb").read()
    with pytest.raises(UnsupportedVersion):
        JournaledQueue(path, name="q")
    with pytest.raises(spec.Unsupported):
        spec.read_queue(path, "q")
    assert open(files[0], "rb").read() == before


@pytest.mark.parametrize(
    "where, n", [("created_ms", 2), ("salt", 4), ("magic", 1), ("version", 1), ("name", 1)]
)
def test_a_damaged_header_is_rebuilt_from_the_records(tmp_path, where: str, n: int) -> None:
    """[F-7]: salt from the header field or solved from the first record's CRC, first_id from
    the first valid PUT, created_ms from the file name; the file's bytes untouched."""
    path = str(tmp_path / "q")
    files = fill(path, 30, per_file=10)
    at_ = {"created_ms": 24, "salt": 12, "magic": 3, "version": 8, "name": 34}[where]
    salt = struct.unpack_from("<I", open(files[1], "rb").read(16), 12)[0]
    flip(files[1], at_, n)
    before = open(files[1], "rb").read()
    got = spec.read_queue(path, "q")
    assert [p[0] for p in got.puts] == list(range(1, 31))
    header = got.files[1][1]
    assert got.files[1][2] == "rebuilt" and header is not None and header.first_id == 11
    assert header.created_ms == int(files[1].rsplit(".", 1)[1])
    assert header.salt == salt
    ids, events = drain(path)
    assert ids == list(range(1, 31))
    assert [e.action for e in events] == ["recovered-header"]
    assert open(files[1], "rb").read() == before


def test_a_file_that_is_not_ours_is_refused_and_never_touched(tmp_path) -> None:
    """[F-8]: no magic, no record, longer than a header: ``ForeignFile``, bytes untouched."""
    path = str(tmp_path / "q")
    fill(path, 3)
    alien = os.path.join(path, "q.1999999999999")
    data = os.urandom(HL + 1).replace(b"\x89", b"\x00")
    with open(alien, "wb") as f:
        f.write(data)
    with pytest.raises(ForeignFile):
        JournaledQueue(path, name="q")
    assert spec.parse_header(data, "q", 1999999999999) == (None, "foreign")
    assert open(alien, "rb").read() == data and sorted(os.listdir(path)).count("q.1999999999999.damaged") == 0


def test_a_newest_file_no_longer_than_a_header_is_set_aside_as_damaged(tmp_path) -> None:
    """[F-9]: 38 + len(name) bytes of anything: an interrupted creation, renamed ``.damaged``
    and reported as ``skipped-file`` (one byte more would be a foreign file)."""
    path = str(tmp_path / "q")
    fill(path, 3)
    stub = os.path.join(path, "q.1999999999999")
    data = b"\x01" * (38 + len("q"))
    with open(stub, "wb") as f:
        f.write(data)
    assert spec.parse_header(data, "q", 1999999999999) == (None, "unreadable")
    ids, events = drain(path)
    assert ids == [1, 2, 3]
    assert [e.action for e in events] == ["skipped-file"]
    assert open(stub + ".damaged", "rb").read() == data and not os.path.exists(stub)


# ------------------------------------------------------------------------------ 4. records
def append_raw(path: str, build) -> None:
    """Append what ``build(salt, offset)`` returns to the newest journal file."""
    f = journal_files(path)[-1]
    salt = struct.unpack_from("<I", open(f, "rb").read(16), 12)[0]
    patch(f, os.path.getsize(f), build(salt, os.path.getsize(f)))


def test_skippable_types_are_skipped_and_must_understand_types_refused(tmp_path) -> None:
    """[F-11]"""
    path = str(tmp_path / "q")
    fill(path, 2)
    append_raw(path, lambda salt, off: spec.encode_record(salt, off, 0x90, b"an index, say"))
    append_raw(path, lambda salt, off: spec.encode_put(salt, off, 3, 0, 0, payload(3)))
    assert [p[0] for p in spec.read_queue(path, "q").puts] == [1, 2, 3]
    assert [r.id for r in JournalScanner(path, "q").records()] == [1, 2, 3]
    assert drain(path)[0] == [1, 2, 3]
    append_raw(path, lambda salt, off: spec.encode_record(salt, off, 0x04, b"new meaning"))
    with pytest.raises(spec.Unsupported):
        spec.read_queue(path, "q")
    with pytest.raises(UnsupportedVersion):
        list(JournalScanner(path, "q").records())


@pytest.mark.parametrize("length", [23, (1 << 30) + 25])
def test_a_length_out_of_bounds_is_damage(tmp_path, length: int) -> None:
    """[F-12]: a PUT body below 24 bytes or above 2^30 + 24 is damage, skipped like any other."""
    path = str(tmp_path / "q")
    files = fill(path, 5)
    patch(files[0], HL + 2 * REC + 4, struct.pack("<I", length))
    assert [p[0] for p in spec.read_queue(path, "q").puts] == [1, 2, 4, 5]
    ids, events = drain(path)
    assert ids == [1, 2, 4, 5] and lost(events) == [(3, 3)]


def test_a_smaller_id_is_skipped_and_a_larger_one_accepted(tmp_path) -> None:
    """[F-13]: ids 1, 2, then a valid PUT of id 1 (skipped), then 5 (accepted: 3-4 lost)."""
    path = str(tmp_path / "q")
    fill(path, 2)
    append_raw(path, lambda salt, off: spec.encode_put(salt, off, 1, 0, 0, payload(1)))
    append_raw(path, lambda salt, off: spec.encode_put(salt, off, 5, 0, 0, payload(5)))
    assert [p[0] for p in spec.read_queue(path, "q").puts] == [1, 2, 5]
    assert [r.id for r in JournalScanner(path, "q").records()] == [1, 2, 5]
    assert spark_ids(path) == [1, 2, 5]
    ids, _ = drain(path)
    assert ids == [1, 2, 5]
    with JournaledQueue(path, name="q") as q:
        assert q.put(b"next") == 6


def test_a_record_validates_only_at_its_own_offset(tmp_path) -> None:
    """[F-14]: the same bytes one record further on fail the CRC (they are damage)."""
    path = str(tmp_path / "q")
    files = fill(path, 3)
    rec1 = open(files[0], "rb").read()[HL : HL + REC]
    patch(files[0], HL + REC, rec1)  # record 1's bytes where record 2 was
    kind = spec.decode(
        open(files[0], "rb").read(), HL + REC, spec.parse_header(open(files[0], "rb").read(), "q", 1)[0].salt
    )[0]  # type: ignore[union-attr]
    assert kind == "damage"
    assert [p[0] for p in spec.read_queue(path, "q").puts] == [1, 3]
    ids, events = drain(path)
    assert ids == [1, 3] and lost(events) == [(2, 2)]


def test_ids_cut_by_recovery_are_never_reused(tmp_path) -> None:
    """[F-15]: point_in_time cuts valid records 4-5 after damage at 3; the next put gets 6."""
    path = str(tmp_path / "q")
    files = fill(path, 5)
    flip(files[0], HL + 2 * REC + 20)
    ids, events = drain(path, recovery="point_in_time")
    assert ids == [1, 2] and [e.action for e in events] == ["cut-at-damage"]
    with JournaledQueue(path, name="q") as q:
        assert q.put(b"after") == 6
    on_disk = [p[0] for p in spec.read_queue(path, "q").puts]
    assert on_disk[-1] == 6 and not {3, 4, 5} & set(on_disk)


# ------------------------------------------------------------------------------ 6. damage
def test_zeros_and_type_zero_are_damage_and_the_scan_goes_on(tmp_path) -> None:
    """[F-16]: a zeroed record mid-file is skipped like any damage; fewer than 9 bytes at the
    end are "incomplete" even when they are zeros (the start of a record whose CRC begins with
    0x00 looks the same), and at the end of the newest file they are a torn tail ([F-17])."""
    path = str(tmp_path / "q")
    files = fill(path, 6)
    patch(files[0], HL + 2 * REC, bytes(REC))
    data = open(files[0], "rb").read()
    salt = spec.parse_header(data, "q", 1)[0].salt  # type: ignore[union-attr]
    assert spec.decode(data, HL + 2 * REC, salt)[0] == "damage"
    assert spec.decode(data + bytes(5), len(data), salt)[0] == "incomplete"
    assert spec.decode(data + b"\x01" * 5, len(data), salt)[0] == "incomplete"
    assert [p[0] for p in spec.read_queue(path, "q").puts] == [1, 2, 4, 5, 6]
    patch(files[0], len(data), bytes(5))
    ids, events = drain(path)
    assert ids == [1, 2, 4, 5, 6]
    assert sorted(e.action for e in events) == ["skipped-damage", "truncated-tail"]
    assert os.path.getsize(files[0]) == len(data)


def damaged_tail(path: str, damage: str) -> tuple[str, int]:
    """One journal file of five items whose end is ``damage``: "cut" (the last record cut
    short), "zeros" (100 zero bytes after it) or "crc" (a byte of the last record flipped);
    returns the file and the last record's offset."""
    files = fill(path, 5)
    last = HL + 4 * REC
    size = os.path.getsize(files[0])
    if damage == "cut":
        os.truncate(files[0], size - 7)
    elif damage == "zeros":
        patch(files[0], size, bytes(100))
    else:
        flip(files[0], last + 30)
    return files[0], last


@pytest.mark.parametrize(
    "damage, action, kept",
    [("cut", "truncated-tail", False), ("zeros", "truncated-tail", False), ("crc", "cut-at-damage", True)],
)
def test_only_a_cut_off_record_or_zeros_is_a_torn_tail(
    tmp_path, damage: str, action: str, kept: bool
) -> None:
    """[F-17]: a CRC mismatch in the last record is damage: cut, its bytes kept aside."""
    path = str(tmp_path / "q")
    newest, last = damaged_tail(path, damage)
    data = open(newest, "rb").read()
    salt = spec.parse_header(data, "q", 1)[0].salt  # type: ignore[union-attr]
    puts, spans = spec.walk(data, salt, HL, len(data), 1)
    assert [p[0] for p in puts] == ([1, 2, 3, 4, 5] if damage == "zeros" else [1, 2, 3, 4])
    assert spec.torn(data, spans[0]) is not kept
    ids, events = drain(path)
    assert ids == [p[0] for p in puts]
    assert [e.action for e in events] == [action]
    assert (events[0].kept is not None) is kept
    if kept:
        assert open(events[0].kept, "rb").read() == data[last:]


@pytest.mark.parametrize(
    "damage, action", [("cut", "truncated-tail"), ("zeros", "truncated-tail"), ("crc", "cut-at-damage")]
)
def test_tolerate_tail_cuts_the_last_span_of_the_newest_file_and_keeps_damage_aside(
    tmp_path, damage: str, action: str
) -> None:
    """Section 6: `tolerate_tail` cuts a final span of the newest file with nothing valid after
    it, torn ([F-17]) or not -- a crash can leave a record partly written and stale bytes or
    zeros after it, which only its place tells from damage -- and keeps damaged bytes aside
    before cutting them, as the default mode does; any other span refuses the open."""
    path = str(tmp_path / "q")
    newest, last = damaged_tail(path, damage)
    before = open(newest, "rb").read()
    ids, events = drain(path, recovery="tolerate_tail")
    assert ids == ([1, 2, 3, 4, 5] if damage == "zeros" else [1, 2, 3, 4])
    assert [e.action for e in events] == [action]
    if action == "cut-at-damage":
        assert open(events[0].kept, "rb").read() == before[last:]
    flip(newest, HL + 2 * REC + 30)  # damage before the last valid record: refused
    with pytest.raises(CorruptJournal) as raised:
        drain(path, recovery="tolerate_tail")
    assert (raised.value.path, raised.value.offset) == (newest, HL + 2 * REC)


def damage_all(path: str, files: list[str], per_file: int) -> None:
    """One of each kind of damage in the older files and the newest."""
    f, off = at(files, 3, per_file)
    flip(f, off + 20)  # CRC mismatch mid-file
    f, off = at(files, 7, per_file)
    patch(f, off + 4, struct.pack("<I", 100_000))  # a length running past the end of the file
    f, off = at(files, 10, per_file)
    flip(f, off + 30)  # the last record of the oldest file
    f, off = at(files, 14, per_file)
    patch(f, off, bytes(2 * REC))  # two records zeroed
    f, off = at(files, 22, per_file)
    patch(f, off + 8, b"\x00")  # type 0
    f, off = at(files, 33, per_file)
    patch(f, off + 4, struct.pack("<I", 5))  # a PUT length below 24, in the newest file


EXPECTED_LOST = [(3, 3), (7, 7), (10, 10), (14, 15), (22, 22), (33, 33)]


def test_owner_scanner_check_spark_and_spec_reader_agree_on_a_damaged_queue(tmp_path) -> None:
    """[F-18] [F-19]: the default open, JournalScanner, ``check``, Spark's segment reader and the
    spec reader deliver the same items and name the same lost ids."""
    path = str(tmp_path / "q")
    files = fill(path, 40, per_file=10)
    damage_all(path, files, 10)
    expected = [i for i in range(1, 41) if not any(lo <= i <= hi for lo, hi in EXPECTED_LOST)]
    mine = spec.read_queue(path, "q")
    assert [p[0] for p in mine.puts] == expected
    assert all(p[4] == payload(p[0]) for p in mine.puts)
    assert sorted(mine.lost) == EXPECTED_LOST
    assert [r.id for r in JournalScanner(path, "q").records()] == expected
    assert spark_ids(path) == expected
    assert sorted(f.ids_lost for f in check_dir(path).findings if f.ids_lost) == EXPECTED_LOST
    ids, events = drain(path)
    assert ids == expected
    assert lost(events) == EXPECTED_LOST


def test_point_in_time_keeps_aside_what_follows_a_length_running_past_an_older_files_end(tmp_path) -> None:
    """[F-20]: valid records follow the damage, so the cut bytes are saved, not dropped."""
    path = str(tmp_path / "q")
    files = fill(path, 30, per_file=10)
    f, off = at(files, 2, 10)
    patch(f, off + 4, struct.pack("<I", 100_000))
    data = open(f, "rb").read()
    ids, events = drain(path, recovery="point_in_time")
    assert ids == [1] + list(range(11, 31))
    (event,) = events
    assert event.action == "cut-at-damage" and event.ids_lost == (2, 10)
    assert event.kept is not None and open(event.kept, "rb").read() == data[off:]


def test_a_scanner_treats_an_incomplete_newest_tail_as_not_yet(tmp_path) -> None:
    """[F-21]"""
    path = str(tmp_path / "q")
    files = fill(path, 4)
    whole = spec.encode_put(
        spec.parse_header(open(files[0], "rb").read(), "q", 1)[0].salt,  # type: ignore[union-attr]
        os.path.getsize(files[0]),
        5,
        0,
        0,
        payload(5),
    )
    patch(files[0], os.path.getsize(files[0]), whole[:20])
    assert [r.id for r in JournalScanner(path, "q").records()] == [1, 2, 3, 4]
    patch(files[0], os.path.getsize(files[0]), whole[20:])
    assert [r.id for r in JournalScanner(path, "q").records()] == [1, 2, 3, 4, 5]
    assert [p[0] for p in spec.read_queue(path, "q").puts] == [1, 2, 3, 4, 5]
    # a newest file whose header is still being written
    partial = os.path.join(path, "q.1999999999999")
    with open(partial, "wb") as f:
        f.write(spec.encode_header(7, 6, 1999999999999, "q")[:20])
    assert [r.id for r in JournalScanner(path, "q").records()] == [1, 2, 3, 4, 5]
    assert [p[0] for p in spec.read_queue(path, "q").puts] == [1, 2, 3, 4, 5]


# ------------------------------------------------------------------------------ 7. checkpoints
def make_readers(path: str) -> None:
    with JournaledQueue(path, QueueConfig(sync="never"), name="q") as q:
        r = q.reader("r")
        for i in range(1, 11):
            q.put(payload(i))
        items = list(ready_items(r))
        for item in items:
            if item.id in (1, 2, 5, 7):
                r.commit(item)
            elif item.id == 4:
                r.abort(item)
            else:
                r.release(item)


def test_a_library_checkpoint_decodes_by_the_spec(tmp_path) -> None:
    """[F-22]"""
    path = str(tmp_path / "q")
    make_readers(path)
    raw = open(os.path.join(path, "q.read.r"), "rb").read()
    ck = spec.decode_checkpoint(raw)
    assert ck is not None and ck.head == 3 and ck.done == [5, 7] and ck.flags == 0
    assert ck.errors == [(4, 1)] and ck.version == 2
    assert len(raw) == 52 + 8 * len(ck.done) + 12 * len(ck.errors) + 8 * len(ck.counts)
    puts = spec.read_queue(path, "q").puts
    assert drain(path)[0] == spec.to_deliver(puts, ck, int(time.time() * 1000))


@pytest.mark.parametrize("damage", ["version", "length", "crc", "magic"])
def test_an_invalid_checkpoint_means_replay_from_the_oldest_item(tmp_path, damage: str) -> None:
    """[F-23]: a checkpoint of another version is treated like a damaged one: replay."""
    path = str(tmp_path / "q")
    make_readers(path)
    ckp = os.path.join(path, "q.read.r")
    if damage == "version":
        raw = spec.encode_checkpoint(3, 0, 0, [5, 7], [], version=3, counts=[])
    else:
        raw = bytearray(open(ckp, "rb").read())
        if damage == "length":
            raw += b"\0"
        elif damage == "crc":
            raw[-1] ^= 1
        else:
            raw[1] ^= 1
        raw = bytes(raw)
    with open(ckp, "wb") as f:
        f.write(raw)
    assert spec.decode_checkpoint(raw) is None
    assert drain(path)[0] == list(range(1, 11))


def test_a_version_1_checkpoint_is_still_read(tmp_path) -> None:
    """[F-22]: what 0.2 wrote (no counters block) keeps its head, done and error counts."""
    path = str(tmp_path / "q")
    make_readers(path)
    with open(os.path.join(path, "q.read.r"), "wb") as f:
        f.write(spec.encode_checkpoint(3, 0, 0, [5, 7], [(4, 2)], version=1))
    assert drain(path)[0] == [3, 4, 6, 8, 9, 10]


def test_checkpoint_counters_are_read_by_position_and_extra_ones_ignored(tmp_path) -> None:
    """[F-37]: counters this version does not know are ignored, ones it knows but the file lacks
    are 0; the reader's ``put`` is ``next_id - put_origin``."""
    path = str(tmp_path / "q")
    make_readers(path)  # ten items put, ids 1..10
    with open(os.path.join(path, "q.read.r"), "wb") as f:
        f.write(
            spec.encode_checkpoint(3, 0, 0, [], [], version=2, counts=[4, 50, 40, 9, 1, 2, 3, 4, 5, 77, 88])
        )
    with JournaledQueue(path, name="q") as q:
        st = q.reader("r").stats()
        assert (st.put, st.delivered, st.committed, st.aborted, st.timed_out) == (7, 50, 40, 9, 1)
        assert (st.expired, st.discarded, st.dead_lettered, st.rejected) == (2, 3, 4, 5)
    with open(os.path.join(path, "q.read.r"), "wb") as f:
        f.write(spec.encode_checkpoint(3, 0, 0, [], [], version=2, counts=[1, 6]))
    with JournaledQueue(path, name="q") as q:
        st = q.reader("r").stats()
        assert (st.put, st.delivered, st.committed, st.dead_lettered) == (10, 6, 0, 0)


def test_checkpoint_flags_are_ignored(tmp_path) -> None:
    """[F-24]"""
    path = str(tmp_path / "q")
    make_readers(path)
    ckp = os.path.join(path, "q.read.r")
    with open(ckp, "wb") as f:
        f.write(spec.encode_checkpoint(3, 0, 0, [5, 7], [], flags=0xFFFF))
    assert drain(path)[0] == [3, 4, 6, 8, 9, 10]


def test_done_may_be_unsorted_and_ids_below_head_are_dropped(tmp_path) -> None:
    """[F-25]"""
    path = str(tmp_path / "q")
    make_readers(path)
    raw = spec.encode_checkpoint(4, 0, 0, [9, 2, 6, 3], [(1, 5), (8, 2)])
    with open(os.path.join(path, "q.read.r"), "wb") as f:
        f.write(raw)
    ck = spec.decode_checkpoint(raw)
    want = spec.to_deliver(spec.read_queue(path, "q").puts, ck, int(time.time() * 1000))
    assert want == [4, 5, 7, 8, 10]
    with JournaledQueue(path, name="q") as q:
        items = list(ready_items(q.reader("r")))
    assert [it.id for it in items] == want
    assert {it.id: it.error_count for it in items} == {4: 0, 5: 0, 7: 0, 8: 2, 10: 0}


def test_a_wrong_position_hint_is_ignored(tmp_path) -> None:
    """[F-26]: a hint at a record whose id is above ``head``, or at no record, is not used."""
    path = str(tmp_path / "q")
    files = fill(path, 10)
    ms = int(files[0].rsplit(".", 1)[1])
    for off in (HL + 6 * REC, HL + 3, 10**6):
        with open(os.path.join(path, "q.read.r"), "wb") as f:
            f.write(spec.encode_checkpoint(4, ms, off, [], []))
        assert drain(path)[0] == list(range(4, 11))
    with open(os.path.join(path, "q.read.r"), "wb") as f:
        f.write(spec.encode_checkpoint(4, ms, HL + 1 * REC, [], []))  # id 2 <= head: a good hint
    assert drain(path)[0] == list(range(4, 11))


# ------------------------------------------------------------------------------ 8. registry
def test_registry_is_canonical_and_readers_accept_any_hex_case_and_width(tmp_path) -> None:
    """[F-27]"""
    path = str(tmp_path / "q")
    with JournaledQueue(path, name="q") as q:
        q.reader("b")
        q.reader("a")
    raw = open(os.path.join(path, "q.readers"), "rb").read()
    assert raw == spec.encode_crc_text("journaled-readers 1", ["a", "b"])
    assert re.fullmatch(rb"journaled-readers 1\na\nb\ncrc32c [0-9a-f]{8}\n", raw)
    body = raw.rsplit(b"crc32c ", 1)[0]
    variant = body + b"crc32c %X\n" % crc32c(body)  # upper case, no leading zeros
    assert (
        decode_crc_text(variant, "journaled-readers 1")
        == spec.decode_crc_text(variant, "journaled-readers 1")
        == ["a", "b"]
    )
    assert encode_crc_text("journaled-readers 1", ["a", "b"]) == raw


def test_a_bookmark_is_one_decimal_id_and_a_damaged_one_counts_as_zero(tmp_path) -> None:
    """[F-28]"""
    path = str(tmp_path / "q")
    os.makedirs(path)
    write_bookmark(path, "spark", 1234)
    p = os.path.join(path, "external", "spark")
    raw = open(p, "rb").read()
    assert spec.decode_crc_text(raw, "journaled-bookmark 1") == ["1234"]
    with open(p, "wb") as f:
        f.write(raw.replace(b"1234", b"1235"))
    assert read_bookmark(path, "spark") == 0


# ------------------------------------------------------------------------------ 12. spool
def test_a_spool_batch_and_the_ledger_decode_by_the_spec(tmp_path) -> None:
    """[F-29] [F-30]"""
    path = str(tmp_path / "q")
    with JournaledQueue(path, name="q") as q:
        q.reader("r")
    assert spool_put(path, [b"one", b"two"], key="k\u00e9y", expire_at=4_000_000_000)
    (batch,) = pending_batches(path)
    assert re.fullmatch(r"\d{20}-\d+-[0-9a-f]{8}\.batch", os.path.basename(batch))
    assert spec.decode_batch(open(batch, "rb").read()) == (
        "k\u00e9y",
        [(b"one", 4_000_000_000_000), (b"two", 4_000_000_000_000)],
    )
    with JournaledQueue(path, name="q") as q:
        assert q.adopt_spool() in (0, 2)
    ledger = open(os.path.join(path, "spool", "ledger"), "rb").read()
    assert spec.ledger_adopted(ledger) == {"k\u00e9y"}
    assert not spool_put(path, [b"again"], key="k\u00e9y")


# ------------------------------------------------------------------------------ 13. delivery
def test_a_reopened_reader_delivers_by_head_done_and_expiry(tmp_path) -> None:
    """[F-31] [F-32]: expire_ms = add_ms + int(ttl * 1000); expired items are never delivered."""
    path = str(tmp_path / "q")
    with JournaledQueue(path, QueueConfig(sync="never"), name="q") as q:
        r = q.reader("r")
        q.put(b"a")
        q.put(b"b", ttl=0.0015)
        q.put(b"c", ttl=3600.25)
        q.put(b"d", ttl=0)
        q.put(b"e")
        first = r.get(block=False)
        r.commit(first)
    puts = spec.read_queue(path, "q").puts
    assert puts[1][3] == puts[1][2] + 1 and puts[2][3] == puts[2][2] + 3_600_250
    time.sleep(0.01)
    ck = spec.decode_checkpoint(open(os.path.join(path, "q.read.r"), "rb").read())
    want = spec.to_deliver(puts, ck, int(time.time() * 1000))
    assert want == [3, 5]
    assert drain(path)[0] == want


@pytest.mark.parametrize("seed", range(12))
def test_every_reader_agrees_under_random_damage(tmp_path, seed: int) -> None:
    """[F-18] [F-19]: random flips, zeroed stretches and bad lengths anywhere after the headers;
    the owner, the scanner, check, Spark and the spec reader deliver the same ids and name the
    same lost ids."""
    rnd = random.Random(seed)
    path = str(tmp_path / "q")
    files = fill(path, 120, per_file=20)
    for _ in range(rnd.randint(1, 6)):
        f = rnd.choice(files)
        off = rnd.randrange(HL, os.path.getsize(f))
        kind = rnd.choice(["flip", "zeros", "length"])
        if kind == "flip":
            flip(f, off, rnd.randint(1, 4))
        elif kind == "zeros":
            patch(f, off, bytes(min(rnd.randint(1, 3 * REC), os.path.getsize(f) - off)))
        else:
            rec = HL + (off - HL) // REC * REC
            patch(f, rec + 4, struct.pack("<I", rnd.choice([0, 23, 10_000, (1 << 30) + 25])))
    read = spec.read_queue(path, "q")
    mine = [p[0] for p in read.puts]
    assert [r.id for r in JournalScanner(path, "q").records()] == mine
    assert spark_ids(path) == mine
    report = check_dir(path)
    assert report.records == len(mine)
    assert sorted(f.ids_lost for f in report.findings if f.ids_lost) == sorted(read.lost)
    ids, events = drain(path)
    assert ids == mine
    assert lost(events) == sorted(read.lost)


@pytest.mark.parametrize("seed", [*range(8), 56, 58, 82])
def test_owner_and_spec_reader_agree_on_random_header_damage(tmp_path, seed: int) -> None:
    """[F-7] [F-8] [F-9]: random damage to headers as well as records: the same items and lost
    ids, the same files rebuilt, and a foreign file exactly where the owner refuses to open."""
    rnd = random.Random(seed)
    path = str(tmp_path / "q")
    files = fill(path, 120, per_file=20)
    for _ in range(rnd.randint(1, 6)):
        f = rnd.choice(files)
        off = rnd.randrange(0, HL) if rnd.random() < 0.5 else rnd.randrange(HL, os.path.getsize(f))
        if rnd.random() < 0.5:
            flip(f, off, rnd.randint(1, 4))
        else:
            patch(f, off, bytes(min(rnd.randint(1, 3 * REC), os.path.getsize(f) - off)))
    read = spec.read_queue(path, "q")
    verdicts = [v for _, _, v in read.files]
    if "foreign" in verdicts:
        with pytest.raises(ForeignFile):
            JournaledQueue(path, name="q")
        return
    ids, events = drain(path)
    assert ids == [p[0] for p in read.puts]
    assert lost(events) == sorted(read.lost)
    assert sum(e.action == "recovered-header" for e in events) == verdicts.count("rebuilt")
    assert sum(e.action == "skipped-file" for e in events) == verdicts.count("unreadable")


# ------------------------------------------------------------------------------ 15. settings
def test_the_settings_file_is_the_canonical_text_of_section_15(tmp_path) -> None:
    """[F-33] [F-4]: the bytes the owner writes are the spec's, byte for byte, rebuilt here from
    the spec's rules with json and crc32c alone; the files are in section 1's inventory."""
    import json

    from journaled import ReaderConfig

    path, dead_path = str(tmp_path / "q"), str(tmp_path / "d\u00e9ad")
    with JournaledQueue(dead_path) as dead, JournaledQueue(path, name="q") as q:
        q.reader("plain")  # the defaults: no line
        q.reader("workers", ReaderConfig(max_errors=2, retry_delay=0.05, dead_letter=dead))
        q.reader("a", ReaderConfig(max_age=7, expire_to=print, max_items=10))
    with open(os.path.join(path, "q.settings"), "rb") as f:
        raw = f.read()
    keys = ["max_memory", "max_items", "max_size", "discard_old_when_full", "max_age", "expire_to"]
    keys += ["open_read_timeout", "max_errors", "dead_letter", "retry_delay", "retry_delay_max"]
    base = dict.fromkeys(keys) | {"max_memory": 16 * 1024 * 1024, "discard_old_when_full": False}
    a = base | {"max_age": 7, "expire_to": {"callable": "builtins.print"}, "max_items": 10}
    w = base | {"max_errors": 2, "retry_delay": 0.05, "dead_letter": {"queue": "../d\u00e9ad"}}
    body = "journaled-settings 1\n"
    for name, obj in (("a", a), ("workers", w)):
        body += f"reader {name} {json.dumps(obj, sort_keys=True, separators=(',', ':'))}\n"
    assert "\\u00e9" in body
    assert raw == body.encode("ascii") + b"crc32c %08x\n" % crc32c(body.encode("ascii"))
    for e in os.listdir(path):
        assert not e.startswith("q.settings") or re.fullmatch(r"q\.settings(\.damaged)?", e), e


def test_a_damaged_settings_file_is_kept_and_lines_of_other_kinds_survive(tmp_path) -> None:
    """[F-34]: a wrong CRC, a bad reader line, a repeated reader: damaged, the defaults apply,
    the bytes stay; replaced only by new settings, kept first in ``.damaged``.  An unknown key
    gives that reader the defaults; a line of another kind survives a rewrite."""
    from journaled import ReaderConfig
    from journaled.disk.settingsfile import load_settings
    from journaled.errors import CorruptJournal

    path = str(tmp_path / "q")
    file = os.path.join(path, "q.settings")
    with JournaledQueue(path, name="q") as q:
        q.reader("r", ReaderConfig(max_errors=2))
    good = encode_crc_text("journaled-settings 1", ['reader r {"max_errors":3,"colour":1}', "later {}"])
    for bad in (
        encode_crc_text("journaled-settings 1", ["reader r [1]"]),
        encode_crc_text("journaled-settings 1", ['reader r {"max_errors":2}', 'reader r {"max_errors":3}']),
        good[:-2] + b"0\n",
    ):
        with open(file, "wb") as f:
            f.write(bad)
        with pytest.raises(CorruptJournal):
            load_settings(file)
        with JournaledQueue(path, name="q") as q:
            assert q.reader("r").config.max_errors is None
        with open(file, "rb") as f:
            assert f.read() == bad
    with open(file, "wb") as f:
        f.write(good)
    with JournaledQueue(path, name="q") as q:
        assert q.reader("r").config.max_errors is None  # an unknown key: that reader's defaults
        q.reader("s", ReaderConfig(max_errors=4))
    assert load_settings(file).other == ("later {}",)
    assert not os.path.exists(file + ".damaged")  # it was not damaged: nothing set aside
    with open(file, "wb") as f:
        f.write(good[:-2] + b"0\n")
    with JournaledQueue(path, name="q") as q:
        q.reader("s", ReaderConfig(max_errors=5))
    with open(file + ".damaged", "rb") as f:
        assert f.read() == good[:-2] + b"0\n"


def test_the_queue_line_holds_the_retention_limits_of_section_15(tmp_path, monkeypatch) -> None:
    """[F-36]: the canonical ``queue`` line after the reader lines and before other kinds; a
    second one or a non-object is damage; an unknown key or a refused value gives no limit; a
    file is past ``retention_age`` when the next file started that long ago, past
    ``retention_bytes`` while the files hold more; the newest file never is."""
    import json

    import journaled.owner.readerfiles as readerfiles
    from journaled import QueueConfig, ReaderConfig
    from journaled.disk.settingsfile import load_settings
    from journaled.errors import CorruptJournal

    path = str(tmp_path / "q")
    file = os.path.join(path, "q.settings")
    cfg = QueueConfig(sync="never", journal_size=400, retention_age=3600, retention_bytes=10**6)
    with JournaledQueue(path, cfg, name="q") as q:
        q.reader("r", ReaderConfig(max_errors=2))
    with open(file, "rb") as f:
        raw = f.read()
    limits = json.dumps({"retention_age": 3600, "retention_bytes": 10**6}, separators=(",", ":"))
    lines = raw.decode("ascii").splitlines()
    assert lines[0] == "journaled-settings 1" and lines[1].startswith("reader r {")
    assert lines[2] == f"queue {limits}" and len(lines) == 4
    assert raw == encode_crc_text("journaled-settings 1", lines[1:3])
    for bad in (["queue [1]"], [f"queue {limits}", f"queue {limits}"], ["queue nope"]):
        with open(file, "wb") as f:
            f.write(encode_crc_text("journaled-settings 1", bad))
        with pytest.raises(CorruptJournal):
            load_settings(file)
    for refused in ({"retention_bytes": 800, "colour": 1}, {"retention_bytes": 0}, {"retention_age": "1h"}):
        with open(file, "wb") as f:
            f.write(encode_crc_text("journaled-settings 1", ["queue " + json.dumps(refused)]))
        with JournaledQueue(path, QueueConfig(sync="never", journal_size=400), name="q") as q:
            for _ in range(40):
                q.put(b"x" * 40)
            first = q.journal.files[0].first_id
            q.archive()
            assert q.journal.files[0].first_id == first  # no limit applied
    with open(file, "wb") as f:
        f.write(encode_crc_text("journaled-settings 1", ['queue {"retention_age":60}']))
    with JournaledQueue(path, QueueConfig(sync="never", journal_size=400), name="q") as q:
        files = list(q.journal.files)
        assert len(files) >= 4
        q.reader("r").seek("earliest")  # a reader that needs every file does not hold them
        q.checkpoint()

        def first_kept(now: int) -> int:
            # Files made within one millisecond start at the same time: a file goes once the
            # file after it started a minute ago, so a run of them may go together.
            last = len(files) - 1
            return next(i for i in range(last + 1) if i == last or started(files[i + 1]) > now - 60_000)

        now = started(files[1]) + 59_999
        monkeypatch.setattr(readerfiles, "now_ms", lambda: now)
        q.archive()
        assert first_kept(now) == 0 and q.journal.files[0].ms == files[0].ms  # 1 ms short: kept
        now = started(files[1]) + 60_000
        q.archive()
        assert first_kept(now) >= 1  # a minute since the next file started
        assert q.journal.files[0].ms == files[first_kept(now)].ms
        monkeypatch.setattr(readerfiles, "now_ms", lambda: started(files[-1]) + 10**9)
        q.archive()
        assert [jf.ms for jf in q.journal.files] == [files[-1].ms]  # the newest never
        assert q.stats().readers[0].head == files[-1].first_id


def test_a_stored_queue_sink_is_opened_by_path_and_a_missing_one_suspends_its_policy(tmp_path) -> None:
    """[F-35]: ``{"queue": "../dead"}`` is opened relative to the queue directory; a directory
    that is not there is not created, and ``max_errors`` is suspended (the item stays)."""
    from journaled import ReaderConfig

    path, dead_path = str(tmp_path / "q"), str(tmp_path / "dead")
    os.makedirs(path, 0o700)
    line = 'reader r {"dead_letter":{"queue":"../dead"},"max_errors":1}'
    with open(os.path.join(path, "q.settings"), "wb") as f:
        f.write(encode_crc_text("journaled-settings 1", [line]))
    with pytest.warns(UserWarning, match="max_errors suspended"), JournaledQueue(path, name="q") as q:
        r = q.reader("r", None)
        assert r.config.max_errors is None and r.config.dead_letter is None
        assert r.config == ReaderConfig()
    assert not os.path.exists(dead_path)
    JournaledQueue(dead_path).close()
    with JournaledQueue(path, name="q") as q:
        r = q.reader("r")
        assert r.config.max_errors == 1 and r.config.dead_letter.path == dead_path


# ------------------------------------------------------------------------------ 4.4 PUTX, 11.2 vector
VECTOR_META = spec.Meta(1700000060000, 0, 0, b"order-42", (("ct", b"json"), ("v", b"2")))


def test_the_second_test_vector_is_a_putx_every_reader_decodes(tmp_path) -> None:
    """[F-10] [F-40]: the PUTX of section 11.2: the library's and the spec reader's bytes are the
    ones printed; the library, the spec reader, the scanner, ``check`` and the owner read one
    item with its key and headers in order (its not-before is long past)."""
    with open(SPEC, encoding="utf-8") as f:
        text = f.read()
    block = text.split("140-byte file:", 1)[1].split("```")[1]
    printed = bytes.fromhex("".join(block.split()))
    lib = encode_header(FileHeader(salt=0x01020304, first_id=1, created_ms=1700000000000, name="events"))
    meta = Meta(not_before_ms=1700000060000, key=b"order-42", headers={"ct": b"json", "v": b"2"})
    lib += encode_putx(0x01020304, len(lib), 1, 1700000000000, 0, meta, b"hello")
    mine = spec.encode_header(0x01020304, 1, 1700000000000, "events")
    mine += spec.encode_putx(0x01020304, len(mine), 1, 1700000000000, 0, VECTOR_META, b"hello")
    assert lib == mine == printed and len(printed) == 140
    rec = decode_one(printed, 44, 0, 0x01020304)
    assert isinstance(rec, PutX) and rec.payload == b"hello" and rec.size == 96
    assert rec.meta == meta and list(rec.meta.headers) == ["ct", "v"]
    header, verdict = spec.parse_header(printed, "events", 1700000000000)
    assert verdict == "ok" and header is not None
    assert spec.walk(printed, header.salt, 44, 140, 1)[0] == [
        (1, 44, 1700000000000, 0, b"hello", VECTOR_META)
    ]
    path = str(tmp_path / "events")
    os.mkdir(path)
    with open(os.path.join(path, "events.1700000000000"), "wb") as f:
        f.write(printed)
    (scanned,) = JournalScanner(path, "events").records()
    assert scanned == rec
    report = check_dir(path, "events")
    assert report.records == 1 and report.clean
    got, lost_ids = owner_items(path, "events")
    assert got == [(1, b"hello", b"order-42", (("ct", b"json"), ("v", b"2")))] and lost_ids == []


def test_an_item_without_metadata_is_written_as_a_put(tmp_path) -> None:
    """[F-38]: no headers (or an empty mapping), no key, a not-before not after the put: a type
    0x01 PUT, byte for byte what it was before PUTX; a put breaking a limit writes nothing."""
    path = str(tmp_path / "q")
    with JournaledQueue(path, QueueConfig(sync="never"), name="q") as q:
        q.put(b"a")
        q.put(b"b", headers={})
        q.put(b"c", not_before=1.0)
        q.put(b"d", delay=0)
        q.put_many([b"e", b"f"], headers={}, keys=[None, None])
        q.put(b"g", key=b"k")
        q.put(b"h", headers={"n": b""})
        for bad in (
            {"key": b""},
            {"key": b"k" * 1025},
            {"headers": {"": b"v"}},
            {"headers": {"n" * 256: b"v"}},
            {"headers": {f"h{i}": b"" for i in range(65)}},
            {"headers": {"big": bytes(64 * 1024)}},
        ):
            with pytest.raises((ValueError, TypeError)):
                q.put(b"x", **bad)  # type: ignore[arg-type]
    (f,) = journal_files(path)
    data = open(f, "rb").read()
    header, _ = spec.parse_header(data, "q", 1)
    assert header is not None
    puts, spans = spec.walk(data, header.salt, HL, len(data), 1)
    assert not spans and [p[4] for p in puts] == [b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"h"]
    assert [data[p[1] + 8] for p in puts] == [1, 1, 1, 1, 1, 1, 2, 2]
    assert [p[5] is None for p in puts] == [True] * 6 + [False] * 2
    first = puts[0]
    assert data[first[1] : first[1] + 34] == encode_put(header.salt, first[1], 1, first[2], 0, b"a")
    assert puts[7][5] == spec.Meta(headers=(("n", b""),))


def putx_raw(item_id: int, case: str) -> bytes:
    """The body of a PUTX whose CRC will be right and whose metadata is ``case``."""
    fields = struct.pack("<QQQ", item_id, 0, 0)

    def body(key: bytes, count: int, block: bytes, key_len: int | None = None) -> bytes:
        kl = len(key) if key_len is None else key_len
        return fields + struct.pack("<QQQHHI", 0, 0, 0, kl, count, len(block)) + key + block + b"payload"

    def hdr(name: bytes, value: bytes, name_len: int | None = None, value_len: int | None = None) -> bytes:
        nl = len(name) if name_len is None else name_len
        return struct.pack("<BI", nl, len(value) if value_len is None else value_len) + name + value

    return {
        "good": body(b"k", 2, hdr(b"a", b"1") + hdr(b"b", b"2")),
        "short": fields + bytes(31),  # [F-12]: a PUTX body below 56 bytes
        "key past the body": body(b"k", 0, b"", key_len=500),
        "count above the block": body(b"k", 3, hdr(b"a", b"1") + hdr(b"b", b"2")),
        "bytes left in the block": body(b"k", 1, hdr(b"a", b"1") + hdr(b"b", b"2")),
        "header past the block": body(b"k", 1, hdr(b"a", b"1", value_len=9)),
        "empty name": body(b"k", 1, hdr(b"", b"1")),
        "name not UTF-8": body(b"k", 1, hdr(b"\xff\xfe", b"1")),
        "name repeated": body(b"k", 2, hdr(b"a", b"1") + hdr(b"a", b"2")),
    }[case]


@pytest.mark.parametrize(
    "case",
    [
        "short",
        "key past the body",
        "count above the block",
        "bytes left in the block",
        "header past the block",
        "empty name",
        "name not UTF-8",
        "name repeated",
    ],
)
def test_a_putx_with_inconsistent_metadata_is_damage_to_every_reader(tmp_path, case: str) -> None:
    """[F-39] [F-12]: a right CRC over metadata whose lengths do not add up, an empty, non-UTF-8
    or repeated name: damage, skipped, its id lost, for the spec reader, the library, the scanner,
    ``check``, Spark and the owner alike."""
    path = str(tmp_path / "q")
    fill(path, 2)
    append_raw(path, lambda salt, off: spec.encode_record(salt, off, 2, putx_raw(3, case)))
    append_raw(path, lambda salt, off: spec.encode_put(salt, off, 4, 0, 0, payload(4)))
    append_raw(path, lambda salt, off: spec.encode_record(salt, off, 2, putx_raw(5, "good")))
    (f,) = journal_files(path)
    data = open(f, "rb").read()
    salt = struct.unpack_from("<I", data, 12)[0]
    bad_at = HL + 2 * REC
    assert spec.decode(data, bad_at, salt)[0] == "damage"
    got = decode_one(data, bad_at, 0, salt)
    assert not isinstance(got, PutX)
    read = spec.read_queue(path, "q")
    assert [p[0] for p in read.puts] == [1, 2, 4, 5] and read.lost == [(3, 3)]
    assert read.puts[-1][5] == spec.Meta(key=b"k", headers=(("a", b"1"), ("b", b"2")))
    scanner = JournalScanner(path, "q")
    assert [r.id for r in scanner.records()] == [1, 2, 4, 5]
    assert [d.offset for d in scanner.damage] == [bad_at]
    report = check_dir(path, "q")
    assert [f.ids_lost for f in report.findings] == [(3, 3)] and report.records == 4
    assert spark_ids(path) == [1, 2, 4, 5]
    ids, events = drain(path)
    assert ids == [1, 2, 4, 5] and lost(events) == [(3, 3)]


def test_a_journal_mixing_put_and_putx_reads_alike_everywhere(tmp_path) -> None:
    """[F-16] [F-13] [F-40]: PUTs and PUTXs across files, with damage just before a PUTX (so the
    forward scan must resume at a PUTX): the spec reader, the scanner, ``check``, Spark and the
    owner deliver the same items with the same keys and headers and name the same lost ids."""
    path = str(tmp_path / "q")
    with JournaledQueue(path, QueueConfig(sync="never", journal_size=2048), name="q") as q:
        q.reader("r")
        for i in range(1, 61):
            if i % 3 == 0:
                q.put(payload(i), key=b"k%d" % i, headers={"n": b"%d" % i, "\u00e9": b"\x00"})
            elif i % 3 == 1:
                q.put(payload(i), headers={"ct": b"json"})
            else:
                q.put(payload(i))
    files = journal_files(path)
    assert len(files) > 2
    on_disk = {p[0]: p for p in spec.read_queue(path, "q").puts}
    assert sorted(on_disk) == list(range(1, 61))
    for victim in (5, 26, 41):  # each followed by a PUTX (ids 6, 27, 42)
        p = on_disk[victim]
        (f,) = [f for f in files if _holds(f, p)]
        flip(f, p[1] + 12)
    read = spec.read_queue(path, "q")
    expected = [i for i in range(1, 61) if i not in (5, 26, 41)]
    assert [p[0] for p in read.puts] == expected and read.lost == [(5, 5), (26, 26), (41, 41)]
    metas = {p[0]: p[5] for p in read.puts}
    assert metas[6] == spec.Meta(key=b"k6", headers=(("n", b"6"), ("\u00e9", b"\x00")))
    assert metas[7] == spec.Meta(headers=(("ct", b"json"),)) and metas[8] is None
    scanned = list(JournalScanner(path, "q").records())
    assert [r.id for r in scanned] == expected
    for r in scanned:
        m = metas[r.id]
        assert isinstance(r, PutX) is (m is not None) and r.payload == payload(r.id)
        if isinstance(r, PutX) and m is not None:
            assert (r.meta.key, tuple(r.meta.headers.items())) == (m.key, m.headers)
    report = check_dir(path, "q")
    assert report.records == len(expected)
    assert sorted(f.ids_lost for f in report.findings if f.ids_lost) == [(5, 5), (26, 26), (41, 41)]
    assert spark_ids(path) == expected
    items, lost_ids = owner_items(path, "q")
    assert lost_ids == [(5, 5), (26, 26), (41, 41)]
    assert [it[0] for it in items] == expected
    for item_id, data, key, headers in items:
        m = metas[item_id]
        assert data == payload(item_id)
        assert (key, headers) == ((m.key, m.headers) if m else (None, ()))


_OWNER_DRAIN = """
import json, sys
from journaled import Empty, JournaledQueue
out = {"items": [], "lost": []}
with JournaledQueue(sys.argv[1], name=sys.argv[2]) as q:
    r = q.reader("r")
    while True:
        try:
            it = r.get(block=False)
        except Empty:
            break
        hdrs = [[k, v.hex()] for k, v in it.headers.items()]
        out["items"].append([it.id, it.data.hex(), None if it.key is None else it.key.hex(), hdrs])
        r.commit(it)
    out["lost"] = sorted(e.ids_lost for e in q.recovery_report if e.ids_lost)
print(json.dumps(out))
"""


def owner_items(path: str, name: str) -> tuple[list[tuple], list[tuple[int, int]]]:
    """What the owner delivers from ``path`` (id, data, key, headers in order) and the ids it
    reports lost, from a process of its own: a fresh interpreter, whose compiled hot path is
    configured as a user's is (some test modules reconfigure it for this one at import)."""
    run = subprocess.run(
        [sys.executable, "-c", _OWNER_DRAIN, path, name],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    got = json.loads(run.stdout)
    items = [
        (
            i,
            bytes.fromhex(d),
            None if k is None else bytes.fromhex(k),
            tuple((n, bytes.fromhex(v)) for n, v in h),
        )
        for i, d, k, h in got["items"]
    ]
    return items, [tuple(x) for x in got["lost"]]


def _holds(path: str, rec: tuple) -> bool:
    data = open(path, "rb").read()
    header, _ = spec.parse_header(data, "q", int(path.rsplit(".", 1)[1]))
    return header is not None and any(p == rec for p in spec.walk(data, header.salt, HL, len(data), 0)[0])


def test_a_putx_not_yet_due_is_not_delivered_and_holds_nothing_back(tmp_path) -> None:
    """[F-31] [F-41]: an item whose not-before is in the future is not delivered now, later items
    are; by the spec it is delivered once due unless it expires first (an expiry at or before the
    not-before means never).  The not-before is in the record: the scanner reads it back, and the
    owner, reopened, delivers what the spec reader says."""
    path = str(tmp_path / "q")
    now = int(time.time() * 1000)
    later = now + 3_600_000
    with JournaledQueue(path, QueueConfig(sync="never"), name="q") as q:
        q.put(b"a")
        q.put(b"b", not_before=later / 1000)
        q.put(b"c")
        q.put(b"d", not_before=later / 1000, expire_at=later / 1000)
        q.put(b"e", not_before=later / 1000, ttl=7200)
    puts = spec.read_queue(path, "q").puts
    assert [p[5].not_before_ms if p[5] else 0 for p in puts] == [0, later, 0, later, later]
    assert spec.to_deliver(puts, None, now) == [1, 3]
    assert spec.to_deliver(puts, None, later) == [1, 2, 3, 5]
    assert spec.to_deliver(puts, None, later + 7_200_000) == [1, 2, 3]  # e expired meanwhile
    scanned = list(JournalScanner(path, "q").records())
    assert [r.meta.not_before_ms if isinstance(r, PutX) else 0 for r in scanned] == [
        0,
        later,
        0,
        later,
        later,
    ]
    delivered, _ = owner_items(path, "q")  # after a reopen, from the records alone
    assert [it[0] for it in delivered] == spec.to_deliver(puts, None, int(time.time() * 1000)) == [1, 3]


def test_an_intent_left_on_disk_is_finished_whole_by_the_owner(tmp_path) -> None:
    """[F-42] an intent older than its publisher's lifetime is finished: every staged file it
    names goes into spool/ (the batch arrives whole); a name that is no staged part is ignored."""
    import time as _time

    from journaled import ReaderConfig
    from journaled.disk import intents
    from journaled.disk.spoolfiles import STAGING, BatchWriter, new_temp_path, spool_dir

    qdir = str(tmp_path / "q")
    JournaledQueue(qdir).close()
    staging = os.path.join(spool_dir(qdir), STAGING)
    parts = []
    for i in range(2):
        tmp = new_temp_path(qdir, STAGING)
        writer = BatchWriter(tmp, f"s:1:{i}")
        writer.add(b"part-%d" % i)
        writer.finish()
        final = os.path.join(staging, os.path.basename(tmp)[1:].removesuffix(".tmp") + ".part")
        os.rename(tmp, final)
        parts.append(final)
    outside = str(tmp_path / "elsewhere.part")
    open(outside, "wb").write(b"not ours")
    intents.write_intent(qdir, "s:1", [*parts, "../../elsewhere.part"])
    (intent,) = [os.path.join(staging, n) for n in os.listdir(staging) if n.endswith(intents.INTENT_SUFFIX)]
    old = _time.time() - intents.ORPHAN_AGE - 1
    os.utime(intent, (old, old))
    with JournaledQueue(qdir) as q:
        r = q.reader("r", ReaderConfig(start="earliest"))
        got = sorted(r.get(timeout=5).data for _ in range(2))
    assert got == [b"part-0", b"part-1"]
    assert not os.path.exists(intent) and open(outside, "rb").read() == b"not ours"


# ------------------------------------------------------------------------------ 8., 7. readers
def test_a_checkpoint_the_intact_registry_does_not_list_is_a_reader(tmp_path) -> None:
    """[F-27a]: the readers are the registry's names and the checkpoint files' names; the owner
    rewrites the registry to list them (a crash between a new reader's checkpoint and the
    registry leaves exactly this)."""
    from journaled.disk import checkpointfiles as ckp

    path = str(tmp_path / "q")
    with JournaledQueue(path, QueueConfig(sync="never"), name="q") as q:
        q.reader("listed")
        q.reader("unlisted")
        q.put_many([b"a", b"b"])
        q.reader("unlisted").commit(q.reader("unlisted").get(block=False))
    ckp.write_registry(ckp.registry_path(path, "q"), ["listed"], 0o600)  # intact, one name short
    with JournaledQueue(path, QueueConfig(sync="never"), name="q") as q:
        assert sorted(r.name for r in q.stats().readers) == ["listed", "unlisted"]
        assert q.reader("unlisted").get(block=False).data == b"b"  # its checkpoint was used
    assert ckp.read_registry(ckp.registry_path(path, "q")) == ["listed", "unlisted"]


def test_put_origin_is_taken_before_the_spool_is_adopted_at_open(tmp_path) -> None:
    """[F-37]: a reader whose checkpoint has no counters block (here: none at all, the registry
    still listing it) takes ``put_origin`` as the next id after recovery and before spool
    adoption, so the items adopted at that open count in its ``put``."""
    import journaled
    from journaled.disk import checkpointfiles as ckp

    path = str(tmp_path / "q")
    with JournaledQueue(path, QueueConfig(sync="never"), name="q") as q:
        q.reader("r")
        q.put(b"before")
    os.unlink(ckp.checkpoint_path(path, "q", "r"))
    journaled.spool_put(path, [b"s1", b"s2", b"s3"], key="batch-1")
    with JournaledQueue(path, QueueConfig(sync="never"), name="q") as q:
        [rs] = q.stats().readers
        assert (rs.name, q.stats().next_id, rs.put) == ("r", 5, 3)


# ------------------------------------------------------------------------------ 4.5 PUTZ, 11.3 vector
def putz_vector() -> bytes:
    with open(SPEC, encoding="utf-8") as f:
        text = f.read()
    block = text.split("the complete 154-byte\nfile:", 1)[1].split("```")[1]
    return bytes.fromhex("".join(block.split()))


def test_the_third_test_vector_is_a_putz_every_reader_decodes(tmp_path) -> None:
    """[F-43] [F-10]: the PUTZ of section 11.3: its inner bytes are what the library and the spec
    reader encode (the frame itself is not canonical); the library, the spec reader, the scanner,
    ``check`` and the owner read its three items, at the unit's offset."""
    from journaled.format import compressed
    from journaled.format.record import Unit

    printed = putz_vector()
    assert len(printed) == 154
    lib = encode_header(FileHeader(salt=0x01020304, first_id=1, created_ms=1700000000000, name="events"))
    assert printed[:44] == lib
    unit = decode_one(printed, 44, 0, 0x01020304)
    assert isinstance(unit, Unit) and (unit.first_id, unit.count, unit.raw_len, unit.size) == (1, 3, 189, 110)
    line = b'{"level":"info","msg":"hello"}'
    inner, mine = b"", b""
    for i in range(3):
        inner += encode_put(0x01020328, len(inner), 1 + i, 1700000000000, 0, line)
        mine += spec.encode_put(0x01020328, len(mine), 1 + i, 1700000000000, 0, line)
    assert compressed.inflate(unit) == inner == mine
    items = [(i, 44, 1700000000000, 0, line, None) for i in (1, 2, 3)]
    header, verdict = spec.parse_header(printed, "events", 1700000000000)
    assert verdict == "ok" and header is not None
    assert spec.walk(printed, header.salt, 44, 154, 1) == (items, [])
    path = str(tmp_path / "events")
    os.mkdir(path)
    with open(os.path.join(path, "events.1700000000000"), "wb") as f:
        f.write(printed)
    assert [(r.id, r.offset, r.payload) for r in JournalScanner(path, "events").records()] == [
        (i, 44, line) for i in (1, 2, 3)
    ]
    report = check_dir(path, "events")
    assert report.records == 3 and report.clean
    got, lost_ids = owner_items(path, "events")
    assert [g[:2] for g in got] == [(i, line) for i in (1, 2, 3)] and lost_ids == []


def test_a_putz_of_an_unknown_codec_is_refused_by_every_reader(tmp_path) -> None:
    """[F-44]: a valid PUTZ naming codec 2 stops the library and the spec reader by name, after
    the items before it."""
    printed = bytearray(putz_vector())
    printed[0x41] = 2  # the codec
    printed[0x2C:0x30] = struct.pack("<I", crc32c(bytes(printed[0x30:154]), 0x01020304 ^ 44))
    lib = encode_header(FileHeader(salt=0x01020304, first_id=1, created_ms=1700000000000, name="events"))
    first = encode_put(0x01020304, 44, 1, 1700000000000, 0, b"before")
    moved = bytes(lib + first)
    # the same PUTZ after one PUT: re-seed its CRC at its new offset
    body = bytes(printed[0x35:154])
    from journaled.format.record import TYPE_PUTZ, encode_record

    body = struct.pack("<Q", 2) + body[8:]
    data = moved + encode_record(0x01020304, len(moved), TYPE_PUTZ, body)
    with pytest.raises(UnsupportedVersion):
        decode_one(data, len(moved), 0, 0x01020304)
    with pytest.raises(spec.Unsupported):
        spec.walk(data, 0x01020304, 44, len(data), 1)
    path = str(tmp_path / "events")
    os.mkdir(path)
    with open(os.path.join(path, "events.1700000000000"), "wb") as f:
        f.write(data)
    scanner = JournalScanner(path, "events")
    with pytest.raises(UnsupportedVersion):
        list(scanner.records())


@pytest.mark.parametrize("damage", ["frame", "raw_len", "count"])
def test_a_putz_with_a_right_crc_and_wrong_content_loses_only_its_items(tmp_path, damage: str) -> None:
    """[F-45]: a PUTZ whose CRC is right but whose frame or fields disagree is damage: the owner
    and the spec reader skip exactly it and deliver the records around it; its ids are lost."""
    from journaled.format import compressed
    from journaled.format.record import TYPE_PUTZ, encode_record

    salt = 0x01020304
    data = encode_header(FileHeader(salt=salt, first_id=1, created_ms=1700000000000, name="events"))
    data += encode_put(salt, len(data), 1, 1700000000000, 0, b"one")
    at = len(data)
    inner = b""
    for i in range(20):
        inner += encode_put(compressed.unit_salt(salt, at), len(inner), 2 + i, 1700000000000, 0, b"x" * 50)
    frame = compressed.zstd.compress(inner)  # type: ignore[union-attr]
    fields = {
        "frame": (2, 20, len(inner), frame[:-1] + bytes([frame[-1] ^ 1])),
        "raw_len": (2, 20, len(inner) - 3, frame),
        "count": (2, 19, len(inner), frame),
    }[damage]
    body = struct.pack("<QIBI", fields[0], fields[1], 1, fields[2]) + fields[3]
    data += encode_record(salt, at, TYPE_PUTZ, body)
    data += encode_put(salt, len(data), 22, 1700000000000, 0, b"after")
    puts, spans = spec.walk(data, salt, 44, len(data), 1)
    assert [p[0] for p in puts] == [1, 22] and [s.offset for s in spans] == [at]
    path = str(tmp_path / "events")
    os.mkdir(path)
    with open(os.path.join(path, "events.1700000000000"), "wb") as f:
        f.write(data)
    got, lost_ids = owner_items(path, "events")
    assert [g[0] for g in got] == [1, 22] and lost_ids == [(2, 21)]
    assert spec.read_queue(path, "events").lost == [(2, 21)]


def test_a_writer_never_writes_a_putz_over_2_20_inner_bytes() -> None:
    """[F-46]: the library refuses to encode a unit over 2^20 inner bytes."""
    from journaled.format import compressed

    with pytest.raises(ValueError, match="inner bytes"):
        compressed.encode_unit(1, 44, 1, 1, b"x" * ((1 << 20) + 1))


@pytest.mark.parametrize("seed", range(10))
def test_every_reader_agrees_under_random_damage_of_a_compressed_queue(tmp_path, seed: int) -> None:
    """[F-43] [F-45] [F-19]: a journal of compressed units and plain records, damaged anywhere
    after the headers: the owner, the scanner, check, Spark and the spec reader deliver the same
    ids and name the same lost ids (a damaged unit: exactly its own)."""
    rnd = random.Random(seed)
    path = str(tmp_path / "q")
    with JournaledQueue(
        path, QueueConfig(sync="never", journal_size=1200, compression="zstd"), name="q"
    ) as q:
        q.reader("r")
        i = 1
        while i <= 150:
            k = rnd.choice([1, 1, 4, 9, 20])
            q.put_many([payload(i + j) for j in range(k)])
            i += k
    files = journal_files(path)
    for _ in range(rnd.randint(1, 5)):
        f = rnd.choice(files)
        off = rnd.randrange(HL, os.path.getsize(f))
        if rnd.random() < 0.7:
            flip(f, off, rnd.randint(1, 3))
        else:
            patch(f, off, bytes(min(rnd.randint(1, 200), os.path.getsize(f) - off)))
    read = spec.read_queue(path, "q")
    mine = [p[0] for p in read.puts]
    assert [r.id for r in JournalScanner(path, "q").records()] == mine
    assert spark_ids(path) == mine
    report = check_dir(path)
    assert report.records == len(mine)
    assert sorted(f.ids_lost for f in report.findings if f.ids_lost) == sorted(read.lost)
    ids, events = drain(path)
    assert ids == mine
    assert lost(events) == sorted(read.lost)
