"""`journaled dump`, `check` and `repair` on items that carry a key, headers or a not-before
(PUTX records, docs/format.md section 4.4)."""

from __future__ import annotations

import base64
import json
import struct

import pytest

from journaled import JournaledQueue, QueueConfig
from journaled.cli.inspection import show_bytes
from journaled.cli.main import main
from journaled.format.record import (
    PUT_FIELDS_STRUCT,
    RECORD_HEADER_SIZE,
    TYPE_PUTX,
    PutX,
    encode_record,
)
from journaled.offline.scan import JournalScanner

NOT_BEFORE = 4_102_444_800  # 2100-01-01T00:00:00Z: never due while these tests run


@pytest.fixture
def mixed(tmp_path):
    """Items 1..6: odd ids plain, 2 with a key and headers, 4 with a not-before, 6 with all."""
    path = str(tmp_path / "q")
    with JournaledQueue(path, QueueConfig(sync="always"), name="q") as q:
        q.put(b"plain-1")
        q.put(b"two", key=b"order\\42\x00", headers={"ct": b"json", "tr\u00e9": b"\x1b[2J"})
        q.put(b"plain-3")
        q.put(b"four", not_before=NOT_BEFORE)
        q.put(b"plain-5")
        q.put(b"six", key=b"k6", headers={"v": b"2"}, not_before=NOT_BEFORE)
    return path


def test_show_bytes_keeps_printable_ascii_and_escapes_every_other_byte():
    assert show_bytes(b"json") == "json"
    assert show_bytes(b"a\\b") == "a\\\\b"
    assert show_bytes(b"\x00\x1b[2J\xff") == "\\x00\\x1b[2J\\xff"
    assert show_bytes("é".encode()) == "\\xc3\\xa9"
    # a backslash is escaped, so bytes that spell an escape never look like the byte it names
    assert show_bytes(b"\\x00") != show_bytes(b"\x00")


def test_dump_shows_key_headers_and_not_before_escaped(mixed, capsys):
    assert main(["dump", mixed]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 6
    assert "key=" not in lines[0] and "headers=" not in lines[0] and lines[0].endswith("plain-1")
    assert "key=order\\\\42\\x00 headers={ct: json, tr\u00e9: \\x1b[2J}  two" in lines[1]
    assert "\x1b" not in "".join(lines)
    assert "not_before=2100-01-01 00:00:00.000  four" in lines[3]
    assert "key=k6 headers={v: 2} not_before=2100-01-01 00:00:00.000  six" in lines[5]


def test_dump_json_gives_key_and_header_values_in_base64(mixed, capsys):
    assert main(["dump", mixed, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["id"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert rows[0]["key"] is None and rows[0]["headers"] == {} and rows[0]["not_before_ms"] is None
    assert base64.b64decode(rows[1]["key"]) == b"order\\42\x00"
    assert {k: base64.b64decode(v) for k, v in rows[1]["headers"].items()} == {
        "ct": b"json",
        "tr\u00e9": b"\x1b[2J",
    }
    assert list(rows[1]["headers"]) == ["ct", "tr\u00e9"]  # the producer's order
    assert rows[3]["not_before_ms"] == NOT_BEFORE * 1000 and rows[3]["key"] is None
    assert rows[1]["size"] == 3


def _records(path: str):
    scanner = JournalScanner(path, "q")
    (sf,) = scanner.files()
    return sf, list(scanner.records())


def _make_putx_lengths_inconsistent(path: str, item_id: int) -> None:
    """Rewrite item ``item_id``'s PUTX in place, same length, with a header count one higher than
    its block holds, and a CRC that is right: only the metadata's own lengths betray it."""
    sf, recs = _records(path)
    assert sf.header is not None
    (rec,) = [r for r in recs if r.id == item_id]
    assert isinstance(rec, PutX)
    with open(sf.path, "rb") as f:
        f.seek(rec.offset)
        old = f.read(rec.size)
    body = bytearray(old[RECORD_HEADER_SIZE:])
    count_at = PUT_FIELDS_STRUCT.size + 8 + 8 + 8 + 2  # header_count u16 in the PUTX body
    (count,) = struct.unpack_from("<H", body, count_at)
    struct.pack_into("<H", body, count_at, count + 1)
    with open(sf.path, "r+b") as f:
        f.seek(rec.offset)
        f.write(encode_record(sf.header.salt, rec.offset, TYPE_PUTX, bytes(body)))


def test_check_is_clean_on_a_journal_of_puts_and_putxs(mixed, capsys):
    assert main(["check", mixed, "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["records"] == 6 and rep["findings"] == []


def test_check_reports_a_putx_with_inconsistent_lengths_as_damage_naming_its_id(mixed, capsys):
    _make_putx_lengths_inconsistent(mixed, 2)
    assert main(["check", mixed, "--json"]) == 1
    rep = json.loads(capsys.readouterr().out)
    (dmg,) = rep["findings"]
    assert dmg["kind"] == "damage" and dmg["ids_lost"] == [2, 2]
    assert dmg["reason"].startswith("PUTX")
    assert rep["records"] == 5
    assert main(["dump", mixed]) == 1
    cap = capsys.readouterr()
    assert [int(line.split()[0]) for line in cap.out.splitlines()] == [1, 3, 4, 5, 6]
    assert "PUTX" in cap.err


def test_repair_keeps_the_key_headers_and_not_before_of_the_records_it_rewrites(mixed, capsys):
    _make_putx_lengths_inconsistent(mixed, 2)
    _, before = _records(mixed)
    assert main(["repair", mixed]) == 0
    capsys.readouterr()
    assert main(["check", mixed]) == 0
    _, after = _records(mixed)
    assert [r.id for r in after] == [1, 3, 4, 5, 6]
    for old, new in zip(before, after, strict=True):
        assert type(new) is type(old) and new.payload == old.payload
        assert getattr(new, "meta", None) == getattr(old, "meta", None)
    six = after[-1]
    assert isinstance(six, PutX)
    assert six.meta.key == b"k6" and dict(six.meta.headers) == {"v": b"2"}
    assert six.meta.not_before_ms == NOT_BEFORE * 1000
    with JournaledQueue(mixed, QueueConfig(recovery="strict"), name="q") as q:
        assert q.put(b"next") == 7


def test_dump_names_the_producer_tag_of_tagged_puts(tmp_path, capsys):
    path = str(tmp_path / "q")
    with JournaledQueue(path, QueueConfig(sync="never"), name="q") as q:
        q.put_many([b"a", b"b"], producer=(7, 100))
        q.put(b"c")
    assert main(["dump", path]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "producer=7:100  a" in lines[0] and "producer=7:101  b" in lines[1]
    assert "producer=" not in lines[2]
    assert main(["dump", path, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["producer"], r["sequence"]) for r in rows] == [(7, 100), (7, 101), (None, None)]
